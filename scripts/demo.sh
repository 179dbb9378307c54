#!/usr/bin/env bash
# README command 1: set up, then run the Ko-PIQA job on the bundled sample on a local Ray instance.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec .venv/bin/piqaforge run ko-piqa "$@"
