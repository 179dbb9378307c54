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
WANT="$(cat scripts/setup_labelstudio.sh scripts/installer.sh scripts/constraints-labelstudio.txt | sha256sum | cut -c1-16)-$LS_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup_labelstudio: .venv-labelstudio is up to date"
  exit 0
fi
echo "setup_labelstudio: creating $VENV (label-studio==$LS_VERSION)"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
# uv with scripts/constraints-labelstudio.txt (the versions a fresh pip set-up resolved), pip with it where uv fails
source scripts/installer.sh
installer "$VENV" scripts/constraints-labelstudio.txt
FIND=()
[[ -d /opt/wheels ]] && FIND=(--find-links /opt/wheels)
install "${FIND[@]}" "label-studio==$LS_VERSION"
# not `label-studio --version`: it creates a database in ~/.local/share and asks pypi.org for news
"$VENV/bin/python" -c "import label_studio, label_studio_sdk; print('label-studio', label_studio.__version__)"
echo "$WANT" > "$STAMP"
echo "setup_labelstudio: done ($VENV/bin/label-studio)"
