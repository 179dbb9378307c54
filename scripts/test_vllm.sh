#!/usr/bin/env bash
# The vLLM-on-CPU tier (scripts/test.sh --vllm): builds .venv-vllm if needed, prepares the local
# model cache, then runs the tests marked `vllm` in that environment. Extra args go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_vllm.sh
# The HF checkpoint is converted with the main environment when it exists (newer transformers);
# the result is plain safetensors that both environments load.
PREP_PY=".venv/bin/python"
[[ -x "$PREP_PY" ]] || PREP_PY=".venv-vllm/bin/python"
"$PREP_PY" -m transforms.llm.prepare
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"  # GiB of KV cache on CPU
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
echo "== pytest -m vllm (in .venv-vllm)"
exec .venv-vllm/bin/python -m pytest -m vllm tests/llm/test_vllm_cpu.py -p no:cacheprovider "$@"
