# GPU workers of types gpu_h100x8_vllm / gpu_h100x1_vllm (cluster.yaml): Ray + vLLM + torch (CUDA).
#   docker build -f docker/vllm.Dockerfile -t ghcr.io/piqaforge/ray-vllm:2.60.0-py311-cu128 .
# Ray's version and Python must match the head's image (rayproject/ray:2.60.0-py311-cpu).
FROM rayproject/ray:2.60.0-py311-cu128
RUN pip install --no-cache-dir "vllm>=0.8" "sentence-transformers>=3" "transformers>=4.50" \
    && python -c "import vllm, numba; print('vllm', vllm.__version__, 'numba', numba.__version__)"
ENV VLLM_WORKER_MULTIPROC_METHOD=spawn PIQAFORGE_NODE_ENV=vllm
