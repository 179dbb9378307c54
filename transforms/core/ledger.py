"""The ledger of finished partitions: what a resumed run may skip.

A partition's done marker `.parts/pNNNNN.json` is written atomically, after its data, listing
exactly its files. On resume, partitions with a marker are skipped, files of the others are
deleted and redone, and files no marker lists (orphans of a failed attempt) are removed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.planning import PARTS_DIR, PLAN

KINDS = ("kept", "rejected", "lineage")


class PartitionLedger:
    """Done markers of one stage's partitions, valid only for one fingerprint and one plan."""

    def __init__(self, kept_dir: Path, rejected_dir: Path, fingerprint: str, plan: str, resume: bool,
                 expected: dict[int, int] | None = None, lineage_dir: Path | None = None,
                 member_rejected: tuple[Path, ...] = ()):
        self.kept_dir, self.rejected_dir, self.lineage_dir = kept_dir, rejected_dir, lineage_dir
        # a fused step (transforms/core/fusion.py): each member's rejected folder, in order, the last one being
        # `rejected_dir`; a file's name counts the rows of all of them together
        self.member_rejected = member_rejected or (rejected_dir,)
        self.dir = kept_dir / PARTS_DIR
        self.fingerprint, self.plan = fingerprint, plan
        current = self._read(self.dir / PLAN)
        if not resume or current != {"fingerprint": fingerprint, "plan": plan}:
            for _, d in self.folders():
                shutil.rmtree(d, ignore_errors=True)
        for d in (*(d for _, d in self.folders()), self.dir):
            d.mkdir(parents=True, exist_ok=True)
        _write_json(self.dir / PLAN, {"fingerprint": fingerprint, "plan": plan})
        self.done: dict[int, dict[str, Any]] = {}
        for marker in sorted(self.dir.glob("p*.json")):
            record = self._read(marker)
            if record and record.get("fingerprint") == fingerprint:
                self.done[int(record["part"])] = record
        if expected:
            self.recover(expected)
        self.remove_unlisted()

    def folders(self) -> list[tuple[str, Path]]:
        """(kind, folder) of every folder the step writes: one kept, one rejected per member, lineage."""
        out = [("kept", self.kept_dir), *(("rejected", d) for d in self.member_rejected)]
        if self.lineage_dir is not None:
            out.append(("lineage", self.lineage_dir))
        return out

    def recover(self, expected: dict[int, int]) -> None:
        """Mark partitions done whose files on disk hold exactly their rows.

        The driver writes markers as write tasks report back; a driver killed between a task
        writing its files and the driver seeing the report would otherwise redo finished work.
        A partition counts as done when its files' names tile its row offsets [0, rows) with no
        gap or overlap and every file's footer holds the row count its name promises.
        """
        blocks: dict[int, set[tuple[int, int, str, int, int, int | None, int | None]]] = {}
        for _, folder in self.folders():
            for f in folder.glob("p*.parquet"):
                parsed = parse_name(f.name)
                if parsed and parsed[0] in expected and parsed[0] not in self.done:
                    part, lo, hi, kept, rejected, consumed, inputs_rejected = parsed
                    blocks.setdefault(part, set()).add((lo, hi, f.name, kept, rejected, consumed, inputs_rejected))
        for part, found in blocks.items():
            cursor = 0
            listed: dict[str, list[str]] = {k: [] for k in KINDS}
            for lo, hi, name, kept, rejected, consumed, inputs_rejected in sorted(found):
                inputs = kept + rejected if consumed is None else consumed + (inputs_rejected or 0)
                if lo != cursor or inputs != hi - lo + 1:
                    break
                want = {"kept": kept, "rejected": rejected, "lineage": consumed or 0}
                if consumed is not None and self.lineage_dir is None:
                    break
                if not all(self._holds([f / name for kind, f in self.folders() if kind == k], want[k]) for k in
                           {k for k, _ in self.folders()}):
                    break
                cursor = hi + 1
                for k in KINDS:
                    if want[k]:
                        listed[k].append(name)
            else:
                if cursor == expected[part]:
                    self.mark_done(part, cursor, listed["kept"], listed["rejected"], listed["lineage"])

    @staticmethod
    def _holds(paths: list[Path], rows: int) -> bool:
        """The files of this name in these folders (a fused step's members' rejected ones) hold `rows` rows."""
        found = 0
        for path in paths:
            if not path.exists():
                continue
            try:
                found += pq.ParquetFile(path).metadata.num_rows
            except (OSError, pa.ArrowInvalid):
                return False
            if found == 0:
                return False  # an empty file is never written
        return found == rows

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def mark_done(self, part: int, rows: int, kept_files: list[str], rejected_files: list[str],
                  lineage_files: list[str] | None = None) -> None:
        record = {"part": part, "rows": rows, "fingerprint": self.fingerprint,
                  "kept_files": sorted(set(kept_files)), "rejected_files": sorted(set(rejected_files)),
                  "lineage_files": sorted(set(lineage_files or []))}
        _write_json(self.dir / f"p{part:05d}.json", record)
        self.done[part] = record

    def remove_unlisted(self) -> None:
        """Delete data files no done marker lists: unfinished partitions and orphaned attempts."""
        for key, folder in self.folders():
            listed = {f for r in self.done.values() for f in r.get(f"{key}_files", [])}
            for f in folder.iterdir():
                if f.name.startswith(".tmp-") or (f.suffix == ".parquet" and f.name not in listed):
                    f.unlink(missing_ok=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.parent / f".tmp-{path.name}-{secrets.token_hex(3)}"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def parse_name(name: str) -> tuple[int, int, int, int, int, int | None, int | None] | None:
    """(part, lo, hi, kept, rejected, consumed, inputs rejected) from a tracked file name."""
    bits = name.removesuffix(".parquet").split("-")
    if len(bits) not in (6, 8) or not bits[3].startswith("k") or not bits[4].startswith("j"):
        return None
    try:
        base = int(bits[0][1:]), int(bits[1]), int(bits[2]), int(bits[3][1:]), int(bits[4][1:])
        if len(bits) == 8:
            if not (bits[5].startswith("c") and bits[6].startswith("i")):
                return None
            return (*base, int(bits[5][1:]), int(bits[6][1:]))
        return (*base, None, None)
    except ValueError:
        return None
