"""Label Studio: the labeling interface, tasks, exports and the SDK round trip (push / pull).

The interface shows the goal and both solutions; the annotator picks one verdict (stored as its
short alias: sol1, sol2, both_wrong, not_physical, unsafe, needs_edit) and may rewrite the goal or a
solution in text areas. Tasks carry `item_id`; LLM pre-labels (a `prelabel` column) become
predictions. Label Studio itself runs in `.venv-labelstudio` (scripts/setup_labelstudio.sh); here
we only talk to it over HTTP with label-studio-sdk's v2 client.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.review.vocabulary import EDIT_FIELDS, VERDICTS

VERDICT_FIELD = "verdict"
COMMENT_FIELD = "comment"


def label_config_xml() -> str:
    choices = "\n".join(f'    <Choice value="{escape(text)}" alias="{alias}"/>' for alias, text in VERDICTS.items())
    edits = "\n".join(
        f'  <TextArea name="{f}_edit" toName="{f}" editable="true" maxSubmissions="1" rows="2" '
        f'placeholder="Rewrite the {"goal" if f == "goal" else "solution"} here only if it needs an edit"/>'
        for f in EDIT_FIELDS)
    return f"""<View>
  <Header value="Goal"/>
  <Text name="goal" value="$goal"/>
  <Header value="Solution 1"/>
  <Text name="sol1" value="$sol1"/>
  <Header value="Solution 2"/>
  <Text name="sol2" value="$sol2"/>
  <Choices name="{VERDICT_FIELD}" toName="goal" choice="single" required="true" showInline="false">
{choices}
  </Choices>
{edits}
  <TextArea name="{COMMENT_FIELD}" toName="goal" editable="true" maxSubmissions="1" rows="1" placeholder="Comment"/>
</View>
"""


def verdict_result(verdict: str, edits: dict[str, str] | None = None, comment: str | None = None) -> list[dict[str, Any]]:
    """A Label Studio `result` list for one verdict (+ edits): what an annotation or prediction holds."""
    out: list[dict[str, Any]] = [{"from_name": VERDICT_FIELD, "to_name": "goal", "type": "choices",
                                  "value": {"choices": [verdict]}}]
    for field, text in (edits or {}).items():
        if text:
            out.append({"from_name": f"{field}_edit", "to_name": field, "type": "textarea",
                        "value": {"text": [text]}})
    if comment:
        out.append({"from_name": COMMENT_FIELD, "to_name": "goal", "type": "textarea", "value": {"text": [comment]}})
    return out


def tasks_for(items: pa.Table, batch: str) -> list[dict[str, Any]]:
    """Tasks JSON for import; rows with a `prelabel` verdict get it as a prediction."""
    cols = ["id", "goal", "sol1", "sol2"] + [c for c in ("prelabel", "prelabel_model") if c in items.schema.names]
    tasks = []
    for row in items.select(cols).to_pylist():
        task: dict[str, Any] = {"data": {"item_id": str(row["id"]), "batch": batch,
                                         "goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"]}}
        if row.get("prelabel") in VERDICTS:
            task["predictions"] = [{"model_version": row.get("prelabel_model") or "prelabel",
                                    "result": verdict_result(row["prelabel"])}]
        tasks.append(task)
    return tasks


def _annotator(completed_by: Any, users: dict[int, str] | None) -> str | None:
    if isinstance(completed_by, dict):
        return completed_by.get("email") or (f"user:{completed_by['id']}" if "id" in completed_by else None)
    if completed_by is None:
        return None
    if users and int(completed_by) in users:
        return users[int(completed_by)]
    return f"user:{completed_by}"


def _texts(value: dict[str, Any]) -> str | None:
    text = value.get("text")
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    return text if text else None


def parse_export(tasks: list[dict[str, Any]], users: dict[int, str] | None = None,
                 origin: str = "labelstudio") -> list[dict[str, Any]]:
    """Label Studio JSON export (full format: tasks with `annotations`, or the flat JSON-MIN rows) →
    judgment rows. Skipped (cancelled) annotations are kept as rows with `skipped=True`; the import
    rejects them with a reason rather than losing them."""
    rows: list[dict[str, Any]] = []
    for task in tasks:
        if "annotations" not in task and VERDICT_FIELD in task:  # JSON-MIN: one flat row per annotation
            rows.append({"judgment_id": f"ls-annotation/{task.get('annotation_id')}", "item_id": task.get("item_id"),
                         "annotator": _annotator(task.get("annotator"), users), "label": task.get(VERDICT_FIELD),
                         **{f"{f}_edit": task.get(f"{f}_edit") for f in EDIT_FIELDS},
                         "comment": task.get(COMMENT_FIELD), "skipped": False, "origin": origin})
            continue
        data = task.get("data") or {}
        for ann in task.get("annotations") or []:
            row: dict[str, Any] = {"judgment_id": f"ls-annotation/{ann.get('id')}", "item_id": data.get("item_id"),
                                   "annotator": _annotator(ann.get("completed_by"), users), "label": None,
                                   **{f"{f}_edit": None for f in EDIT_FIELDS}, "comment": None,
                                   "skipped": bool(ann.get("was_cancelled")), "origin": origin}
            for res in ann.get("result") or []:
                name, value = res.get("from_name"), res.get("value") or {}
                if name == VERDICT_FIELD:
                    picked = value.get("choices") or []
                    row["label"] = picked[0] if len(picked) == 1 else ("|".join(picked) or None)
                elif name == COMMENT_FIELD:
                    row["comment"] = _texts(value)
                elif isinstance(name, str) and name.endswith("_edit"):
                    row[name] = _texts(value)
            rows.append(row)
    return rows


# -- the server ----------------------------------------------------------------------------------
def server_env(data_dir: str | Path) -> dict[str, str]:
    """Environment for a local, offline Label Studio: SQLite under `data_dir`, and nothing that
    phones home (version check against pypi.org, usage analytics, Sentry, remote feature flags)."""
    return {"LABEL_STUDIO_BASE_DATA_DIR": str(data_dir), "DJANGO_DB": "sqlite",
            "LATEST_VERSION_CHECK": "false", "COLLECT_ANALYTICS": "false", "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "", "FEATURE_FLAGS_OFFLINE": "true",
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true"}


def client(url: str, api_key: str | None) -> Any:
    try:
        from label_studio_sdk import LabelStudio
    except ImportError as err:
        raise ImportError("Label Studio push/pull needs label-studio-sdk: pip install -e '.[review]'") from err
    key = api_key or os.environ.get("LABEL_STUDIO_API_KEY")
    if not key:
        raise ValueError("no Label Studio API key: pass --api-key or set LABEL_STUDIO_API_KEY")
    return LabelStudio(base_url=url, api_key=key)


def talking_to(url: str) -> Any:
    """Turn the SDK's and httpx's errors into one readable ReviewError naming the server."""
    import contextlib

    from transforms.review.vocabulary import ReviewError

    @contextlib.contextmanager
    def guard() -> Any:
        import httpx
        from label_studio_sdk.core.api_error import ApiError

        try:
            yield
        except ApiError as err:
            raise ReviewError(f"Label Studio at {url} answered {err.status_code}: {err.body}") from err
        except httpx.HTTPError as err:
            raise ReviewError(f"cannot reach Label Studio at {url}: {err} (is it running? see docs/review.md)") from err

    return guard()


def push(ls: Any, title: str, tasks: list[dict[str, Any]]) -> int:
    """Create a project with our labeling interface and import the tasks (predictions included)."""
    project = ls.projects.create(title=title, label_config=label_config_xml())
    ls.projects.import_tasks(id=project.id, request=tasks, return_task_ids=True)
    return int(project.id)


def pull(ls: Any, project_id: int) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Every task of the project with its annotations (as a JSON export has them), and user id → email."""
    tasks = []
    for task in ls.tasks.list(project=project_id, fields="all"):
        t = task.model_dump() if hasattr(task, "model_dump") else dict(task)
        tasks.append({"id": t.get("id"), "data": t.get("data"), "annotations": t.get("annotations") or [],
                      "predictions": t.get("predictions") or []})
    users = {int(u.id): u.email or u.username for u in ls.users.list()}
    return tasks, users
