"""`piqaforge publish RELEASE_DIR --repo ORG/NAME [--private] [--dry-run]`: push a gated release to the Hub.

Only a folder the gate passed is published: it must carry `RELEASED`, and every file must still have the
sha256 the marker recorded (nothing added, changed or removed since). The card is checked offline first
(`hub.check_card`). The token is read from `HF_TOKEN` in the environment and handed to the client only; it
is registered with the log scrubber and never written anywhere (docs/secrets.md). `--dry-run` prints what
would be uploaded and runs the checks, offline. The client is injectable (tests use a recording one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from transforms.release.hub import REPO_ID, check_card
from transforms.release.writer import RELEASED, checksums

TOKEN_ENV = "HF_TOKEN"


class PublishError(RuntimeError):
    """The folder must not be published (not released, changed since, a bad card or repo id)."""


class HubClient(Protocol):
    def create_repo(self, repo_id: str, *, token: str | bool | None = ..., private: bool | None = ...,
                    repo_type: str | None = ..., exist_ok: bool = ...) -> Any: ...

    def upload_folder(self, *, repo_id: str, folder_path: str | Path, commit_message: str | None = ...,
                      token: str | bool | None = ..., repo_type: str | None = ...,
                      allow_patterns: list[str] | str | None = ...) -> Any: ...


def verify_released(folder: Path) -> dict[str, Any]:
    """The marker, after checking every recorded checksum against the folder; raises PublishError."""
    marker = folder / RELEASED
    if not marker.exists():
        raise PublishError(f"{folder}: no {RELEASED} marker: the gate did not pass this folder (or it is no "
                           "release); only a released version is published")
    record = json.loads(marker.read_text(encoding="utf-8"))
    recorded: dict[str, str] = record.get("files") or {}
    if not recorded:
        raise PublishError(f"{folder}: {RELEASED} records no checksums (written before issue 26); release it again")
    now = checksums(folder)
    changed = sorted(p for p in recorded if p in now and now[p] != recorded[p])
    missing = sorted(p for p in recorded if p not in now)
    added = sorted(p for p in now if p not in recorded)
    if changed or missing or added:
        parts = [f"{what}: {', '.join(paths[:5])}" for what, paths in
                 (("changed", changed), ("missing", missing), ("added", added)) if paths]
        raise PublishError(f"{folder}: files differ from what the gate passed ({'; '.join(parts)}); "
                           "release a new version instead")
    return record


def plan(folder: str | Path, repo_id: str) -> dict[str, Any]:
    """Everything checked offline: released and unchanged, the card's metadata, the repo id. What would go up."""
    folder = Path(folder)
    if not REPO_ID.match(repo_id):
        raise PublishError(f"--repo {repo_id!r} is not a Hub dataset id (ORG/NAME)")
    record = verify_released(folder)
    problems = check_card(folder)
    if problems:
        raise PublishError(f"{folder / 'README.md'}: the card's metadata would not pass the Hub: " + "; ".join(problems))
    files = sorted(record["files"]) + [RELEASED]
    sizes = {p: (folder / p).stat().st_size for p in files}
    return {"repo_id": repo_id, "folder": str(folder), "files": files, "bytes": sum(sizes.values()),
            "items": record.get("items"), "released_at": record.get("released_at")}


def publish(folder: str | Path, repo_id: str, *, private: bool = False, dry_run: bool = False,
            client: HubClient | None = None) -> dict[str, Any]:
    """Check, then (unless `dry_run`) create the dataset repo and upload the folder as one commit."""
    info = plan(folder, repo_id)
    info["private"] = private
    if dry_run:
        info["uploaded"] = False
        return info
    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise PublishError(f"publishing needs a Hub token in ${TOKEN_ENV} (the environment only; never a file or "
                           "a flag)")
    from transforms.core.secrets import register_secret_values

    register_secret_values([token])  # scrubbed from every log line and error we print
    if client is None:
        try:
            from huggingface_hub import HfApi
        except ImportError as err:
            raise ImportError("publishing needs huggingface_hub: pip install -e '.[hub]'") from err
        client = HfApi()
    client.create_repo(repo_id, token=token, private=private, repo_type="dataset", exist_ok=True)
    commit = client.upload_folder(repo_id=repo_id, folder_path=str(info["folder"]), token=token,
                                  repo_type="dataset", allow_patterns=list(info["files"]),
                                  commit_message=f"piqaforge release {Path(info['folder']).name} "
                                                 f"({info['items']} items, gate passed {info['released_at']})")
    info["uploaded"] = True
    info["commit"] = str(getattr(commit, "commit_url", commit))
    return info
