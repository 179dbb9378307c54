"""Feedback to writers: one CSV per writer of the rows that were rejected and why, and a summary."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.core import columns as C
from transforms.io.common import DROP_DETAIL
from transforms.io.writer_files import SOURCE_FILE, SOURCE_ROW, WRITER

FILE_NOTE = "file_note"

def write_feedback(table: pa.Table, notes: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Any]:
    """One `<writer>.csv` per writer (file, row, item id, reason, detail) and `summary.json`.

    The CSVs start with a byte-order mark so that spreadsheet programs show Tamil text correctly.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = table.select([WRITER, SOURCE_FILE, SOURCE_ROW, C.ID, C.DROP_REASON, DROP_DETAIL]).to_pylist()
    writers = sorted({r[WRITER] for r in rows})
    file_writers: dict[str, set[str]] = {}
    for r in rows:
        file_writers.setdefault(r[SOURCE_FILE], set()).add(r[WRITER])
    summary: dict[str, Any] = {}
    for writer in writers:
        mine = [r for r in rows if r[WRITER] == writer]
        bad = [r for r in mine if r[C.DROP_REASON]]
        with open(out / f"{writer}.csv", "w", encoding="utf-8-sig", newline="") as f:
            w = csv.writer(f)
            w.writerow(["file", "row", "item_id", "reason", "detail"])
            for note in notes:
                if writer in file_writers.get(note["file"], set()):
                    w.writerow([note["file"], "", "", FILE_NOTE, note["note"]])
            for r in bad:
                w.writerow([r[SOURCE_FILE], r[SOURCE_ROW], r[C.ID], r[C.DROP_REASON], r[DROP_DETAIL]])
        summary[writer] = {"rows": len(mine), "accepted": len(mine) - len(bad), "rejected": len(bad),
                           "reasons": dict(Counter(r[C.DROP_REASON] for r in bad))}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return summary
