#!/usr/bin/env bash
# README command 1: set up, then run the Ko-PIQA recipe (jobs/recipes/ko-piqa.yaml) on the bundled sample on a
# local Ray instance. It ends with the review batch for people (awaiting_review). `bash scripts/demo.sh --set
# review=auto` lets LLM annotators review instead and goes on to the release and its evaluation when they keep
# items (docs/stages.md, "Ko-PIQA items from the local models").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec .venv/bin/piqaforge run ko-piqa "$@"
