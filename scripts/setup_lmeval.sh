#!/usr/bin/env bash
# lm-evaluation-harness lives in its own environment, .venv-lmeval: it pulls datasets, evaluate,
# accelerate and their pins, which must not share .venv with the project. Only the slow test that
# runs our exported Global-PIQA-shaped tasks through a real `lm_eval` (tests/eval/test_lm_eval_run.py)
# and people checking an export by hand use it. The CPU torch wheel goes in first (from
# /opt/wheels when present) so nothing pulls CUDA wheels; never a bare `torch`.
# Idempotent: a second run with unchanged inputs is a no-op.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="$ROOT/.venv-lmeval"
STAMP="$VENV/.piqaforge-lmeval-setup"
LM_EVAL_VERSION="${LM_EVAL_VERSION:-0.4.13}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
WANT="$(cat scripts/setup_lmeval.sh scripts/installer.sh scripts/constraints-lmeval.txt | sha256sum | cut -c1-16)-$LM_EVAL_VERSION-$TORCH_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup_lmeval: .venv-lmeval is up to date"
  exit 0
fi
echo "setup_lmeval: creating $VENV (lm-eval==$LM_EVAL_VERSION, torch==$TORCH_VERSION CPU)"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
# uv with scripts/constraints-lmeval.txt (the versions a fresh pip set-up resolved), pip with it where uv fails
source scripts/installer.sh
installer "$VENV" scripts/constraints-lmeval.txt
FIND=()
[[ -d /opt/wheels ]] && FIND=(--find-links /opt/wheels)
# The CPU torch first, pinned again on every later install, so no resolver swaps in a CUDA build.
install "${FIND[@]}" "torch==$TORCH_VERSION"
install "${FIND[@]}" "lm-eval==$LM_EVAL_VERSION" transformers accelerate "torch==$TORCH_VERSION"
"$VENV/bin/python" -c "import lm_eval, torch, transformers; print('setup_lmeval: lm_eval', \
lm_eval.__version__ if hasattr(lm_eval, '__version__') else '?', 'torch', torch.__version__, \
'transformers', transformers.__version__, 'cuda', torch.version.cuda)"
echo "$WANT" > "$STAMP"
echo "setup_lmeval: done ($VENV/bin/lm_eval)"
