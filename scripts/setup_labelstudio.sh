#!/usr/bin/env bash
# Label Studio runs in its own environment, .venv-labelstudio: it pins Django, pydantic, numpy and
# many more, which must not share .venv with the project. Only the slow review test and people
# reviewing items start it; piqaforge talks to it over HTTP with label-studio-sdk (in .venv).
# Idempotent: a second run with unchanged inputs is a no-op.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="$ROOT/.venv-labelstudio"
STAMP="$VENV/.piqaforge-labelstudio-setup"
LS_VERSION="${LABEL_STUDIO_VERSION:-1.23.0}"
WANT="$(cat scripts/setup_labelstudio.sh scripts/constraints-labelstudio.txt | sha256sum | cut -c1-16)-$LS_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup_labelstudio: .venv-labelstudio is up to date"
  exit 0
fi
echo "setup_labelstudio: creating $VENV (label-studio==$LS_VERSION)"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
FIND=()
[[ -d /opt/wheels ]] && FIND=(--find-links /opt/wheels)
"${PIP[@]}" --upgrade pip wheel
# uv with scripts/constraints-labelstudio.txt (the versions a fresh pip set-up resolved) where it installs, else pip with them
UV=()
if [[ "${PIQAFORGE_INSTALLER:-uv}" == uv ]] && "${PIP[@]}" uv >/dev/null 2>&1; then
  UV=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python")
fi
install() {
  if [[ ${#UV[@]} -gt 0 ]] && "${UV[@]}" -c scripts/constraints-labelstudio.txt "$@"; then return 0; fi
  "${PIP[@]}" -c scripts/constraints-labelstudio.txt "$@"
}
install "${FIND[@]}" "label-studio==$LS_VERSION"
# not `label-studio --version`: it creates a database in ~/.local/share and asks pypi.org for news
"$VENV/bin/python" -c "import label_studio, label_studio_sdk; print('label-studio', label_studio.__version__)"
echo "$WANT" > "$STAMP"
echo "setup_labelstudio: done ($VENV/bin/label-studio)"
