"""The cluster rehearsal: cluster.yaml's Ray cluster on this one machine, every recipe submitted to it.

    bash scripts/cluster_rehearsal.sh [--recipes ko-piqa,zh-piqa] [--keep]

1. One virtualenv per node set-up, built only from what the cluster runs on that node type
   (harness/rehearsal/envs.py: the image's pip lines, then cluster/setup_node.sh unchanged; CUDA-only
   packages swapped for their CPU builds, each swap printed).
2. A head with `CPU: 0` (the driver, GCS and dashboard only) and one raylet per worker type, each
   started from its node type's venv with the type's custom resources (`env_vllm`, `env_cuml`,
   `env_cpu`, `accelerator_type:H100`) and its declared GPUs (`--num-gpus`), so Ray places stages as
   it would on the cluster although no GPU is here; plus `rehearsal_node:<type>` to name each node.
   A shared lake folder plays the shared file system; vLLM's OpenAI-compatible server runs from the
   vLLM node's venv for the roles cluster/rehearsal.yaml says are served.
3. Every recipe through `piqaforge submit <recipe> --address http://127.0.0.1:<dashboard>` with its
   cluster config and the models swapped in one place (cluster/rehearsal.yaml). Each must finish (a
   review batch or a release) with the lineage law holding in every run, counted from disk.
4. From Ray's state API: every stage's worker (each stage notes its actor or task id when it sets
   up, PIQAFORGE_PLACEMENT_LOG) ran on a node of a type whose resources its demand names (LLM stages
   on vLLM nodes, clustering on the cuML node, CPU stages on CPU workers), nothing on the head, and the
   driver on the head.
Everything it started is stopped and its temp dirs removed on exit, failed or not (`--keep` leaves the
cluster up for a look: it prints how to stop it).

The package: envs.py (the venvs), nodes.py (the head, the raylets and vLLM's server, stopped on exit),
recipes.py (each recipe submitted and checked: the lineage law, where every stage ran), run.py (the
whole rehearsal; `python -m harness.rehearsal`). A test harness, not part of the installed package:
`python -m jobs.rehearsal` still runs it for one release.
"""
