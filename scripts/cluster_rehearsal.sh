#!/usr/bin/env bash
# The cluster path rehearsed on this machine (docs/cluster.md, "Rehearsal"): cluster.yaml's node types as
# raylets, each from a venv built by its image's pip lines + cluster/setup_node.sh, every recipe submitted
# with `piqaforge submit`, placement checked from Ray's state API. Needs the README's set-up (.venv).
#   bash scripts/cluster_rehearsal.sh [--recipes ko-piqa,zh-piqa] [--keep] [--shared-venv | --ci]
# --ci is CI's tier (scripts/test.sh --slow): no venv built, every raylet from .venv, every model role the engine
# double (harness/rehearsal/double.py), every stage of every run placed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -x .venv/bin/python ]] || bash scripts/setup.sh
# the packaged Gemma checkpoint every vLLM role is swapped for (idempotent; CI's tier loads no model)
if [[ " $* " != *" --ci "* ]]; then
  .venv/bin/python -m transforms.llm.prepare gemma3-270m >/dev/null
fi
export RAY_AUTH_MODE=token
exec .venv/bin/python -m harness.rehearsal "$@"
