# GPU workers of type gpu_h100x1_cuml (cluster.yaml): Ray + RAPIDS cuML/cuDF for clustering.
#   docker build -f docker/cuml.Dockerfile -t ghcr.io/piqaforge/ray-cuml:2.60.0-py311-cu12 .
# cuML pins its own numba, incompatible with vLLM's: that is why this is a separate image.
FROM rayproject/ray:2.60.0-py311-cu128
RUN pip install --no-cache-dir --extra-index-url=https://pypi.nvidia.com "cuml-cu12>=25.2" "cudf-cu12>=25.2" \
    && python -c "import cuml, numba; print('cuml', cuml.__version__, 'numba', numba.__version__)"
ENV PIQAFORGE_NODE_ENV=cuml
