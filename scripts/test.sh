#!/usr/bin/env bash
# README command 2 (and .ci/run): set up if needed, lint, type-check, run the tests, each tier against its budget.
#   scripts/test.sh            the default tier: ruff, mypy, lint-imports, pytest (budget 10 min)
#   scripts/test.sh --slow     CI's tier (.ci/run): the default tier with the slow tests marked `ci` that may share the
#                              machine, in one pytest run; then the `ci` ones that run alone (a SIGKILLed creating
#                              stage resumed, node loss, a real Jobs API head); then the float-sensitive tests
#                              playing another CPU twice
#   scripts/test.sh --extended the slow tests CI leaves out (slow, not `ci`: whole real-model runs, the other kill
#                              points, every recipe on the cluster path: the rehearsal's CI tier, the storm's fixed
#                              points, the device check, the forecast against a larger run), the shared ones on two
#                              workers, then the `alone` ones, then their float-sensitive ones playing another CPU;
#                              run it before resolving anything touching stages, the orchestrator or a recipe
#   scripts/test.sh --other-cpu only the float-sensitive tests playing another CPU (both directions)
#   scripts/test.sh --all      the default tier, then the slow (extended included), recipes and rehearsal tiers
#                              (whole recipe jobs on the local Qwen 1.5B; the cluster rehearsal with the images'
#                              venvs and vLLM's CPU build)
#   scripts/test.sh --vllm     the vLLM-on-CPU tier, in its own environment (.venv-vllm)
#   scripts/test.sh --rehearsal the cluster rehearsal with the images' venvs and vLLM's CPU build
#   scripts/test.sh --storm    the whole kill-and-resume storm of a creating recipe (its three fixed points run in the
#                              slow tier)
#   scripts/test.sh -- ARGS    one pytest run with extra arguments (the default tier's marker unless a mode is given;
#                              no budget check)
# Each budgeted run (scripts/tier_budget.py BUDGETS) prints its time against its budget; one more than 10% over
# fails and prints its ten slowest tests. PIQAFORGE_TEST_WORKERS=N runs the default tier, the shared slow tests and
# the other-CPU passes on N pytest-xdist workers, one test module per worker (its fixtures made once); the default is
# 2 on a machine with two cores or more: on this project's 2-core machines two workers measured 26% faster than one
# on the default tier with the shared slow tests, whose tests often wait on a Ray start, a subprocess or a model
# load. The `alone` tests never share.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PIQAFORGE_TIER_COMMAND="bash scripts/test.sh${*:+ $*}"  # what a recorded run's results file says ran
DEFAULT_MARK="not slow and not recipes and not vllm and not gpu and not storm and not rehearsal"
SLOW_MARK="slow and not recipes and not vllm and not gpu and not storm and not rehearsal"
CI_SLOW_MARK="$SLOW_MARK and ci"
EXT_MARK="$SLOW_MARK and not ci"
MODE=default
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --slow) MODE=slow; shift ;;
    --extended) MODE=extended; shift ;;
    --other-cpu) MODE=other-cpu; shift ;;
    --rehearsal) MODE=rehearsal; shift ;;
    --all) MODE=all; shift ;;
    --storm) MODE=storm; shift ;;
    --vllm) exec bash scripts/test_vllm.sh ;;
    --) shift; EXTRA=("$@"); break ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
# two workers where there are two cores or more (the default tier: 317 s on two workers against 459 s on one,
# measured on this project's 2-core machine kind); PIQAFORGE_TEST_WORKERS=1 runs one pytest process
WORKERS="${PIQAFORGE_TEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 1) >= 2 ? 2 : 1 ))}"
PARALLEL=()
[[ "$WORKERS" -gt 1 ]] && PARALLEL=(-n "$WORKERS" --dist loadfile)
export PIQAFORGE_TIER_RUN="${PIQAFORGE_TIER_RUN:-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
REPORTS="$(mktemp -d "${TMPDIR:-/tmp}/piqaforge-tiers.XXXXXX")"
trap 'rm -rf "$REPORTS"' EXIT

t0=$SECONDS
bash scripts/setup.sh
# The extended tier's Label Studio round trip runs a real server from its own venv (it pins many packages), and its
# lm-eval comparisons run lm-evaluation-harness from .venv-lmeval.
if [[ "$MODE" == extended || "$MODE" == all ]]; then bash scripts/setup_labelstudio.sh; bash scripts/setup_lmeval.sh; fi
.venv/bin/python scripts/tier_budget.py set-up "$((SECONDS - t0))"

rc=0
keep_first_failure() { [[ $rc -ne 0 ]] || rc=$1; }
budget() {  # TIER START_SECONDS JUNIT...
  local tier=$1 start=$2; shift 2
  .venv/bin/python scripts/tier_budget.py "$tier" "$((SECONDS - start))" "$@" || keep_first_failure $?
}

lint() {
  echo "== ruff"; .venv/bin/ruff check transforms jobs expectations harness tests benchmarks scripts/tier_budget.py
  echo "== mypy transforms/"; .venv/bin/mypy
  echo "== import layers (lint-imports)"; .venv/bin/lint-imports
}

if [[ ${#EXTRA[@]} -gt 0 ]]; then
  lint
  case "$MODE" in
    default) mark="$DEFAULT_MARK" ;; slow) mark="($DEFAULT_MARK) or ($CI_SLOW_MARK)" ;;
    extended) mark="$EXT_MARK" ;;
    all) mark="not vllm and not gpu and not storm" ;; *) mark="$MODE" ;;
  esac
  [[ "$MODE" == other-cpu ]] && mark=""
  set +e
  .venv/bin/python -m pytest ${mark:+-m "$mark"} --durations=30 "${EXTRA[@]}"
  exit $?  # pytest's 5 (nothing collected) stays a failure
fi

set +e
if [[ "$MODE" == default || "$MODE" == slow || "$MODE" == extended || "$MODE" == all ]]; then
  start=$SECONDS
  (set -e; lint) || keep_first_failure $?
  .venv/bin/python scripts/tier_budget.py lint "$((SECONDS - start))"
fi
if [[ "$MODE" == default || "$MODE" == all ]]; then
  start=$SECONDS
  echo "== pytest -m '$DEFAULT_MARK'${PARALLEL:+ on $WORKERS workers}"
  .venv/bin/python -m pytest -m "$DEFAULT_MARK" "${PARALLEL[@]}" --durations=20 \
    --junitxml="$REPORTS/default.xml"
  keep_first_failure $?
  budget default "$start" "$REPORTS/default.xml"
fi
if [[ "$MODE" == slow ]]; then
  # CI's tier: the default tier and the slow tests that may share the machine in one pytest run, so that a module's
  # fixtures (a model's embeddings, a fitted judge) are made once for its fast and its slow tests
  start=$SECONDS
  echo "== pytest -m '($DEFAULT_MARK) or ($CI_SLOW_MARK and not alone)'${PARALLEL:+ on $WORKERS workers}"
  .venv/bin/python -m pytest -m "($DEFAULT_MARK) or ($CI_SLOW_MARK and not alone)" "${PARALLEL[@]}" --durations=30 \
    --junitxml="$REPORTS/default-slow.xml"
  keep_first_failure $?
  budget default+slow "$start" "$REPORTS/default-slow.xml"
elif [[ "$MODE" == extended ]]; then
  ext_start=$SECONDS
  echo "== pytest -m '$EXT_MARK and not alone'${PARALLEL:+ on $WORKERS workers}"
  .venv/bin/python -m pytest -m "$EXT_MARK and not alone" "${PARALLEL[@]}" --durations=20 \
    --junitxml="$REPORTS/extended-shared.xml"
  keep_first_failure $?
  echo "== pytest -m '$EXT_MARK and alone', one at a time"
  .venv/bin/python -m pytest -m "$EXT_MARK and alone" --durations=20 --junitxml="$REPORTS/extended-alone.xml"
  keep_first_failure $?
  echo "== pytest -m '$EXT_MARK and floats', playing another CPU: bundle vectors moved, ATEN_CPU_CAPABILITY=avx2"
  PYTHONPATH="$ROOT/tests/other_cpu:$ROOT" PIQAFORGE_TEST_OTHER_CPU=bundle ATEN_CPU_CAPABILITY=avx2 \
    .venv/bin/python -m pytest -m "$EXT_MARK and floats" -q -p no:cacheprovider "${PARALLEL[@]}" \
    --junitxml="$REPORTS/extended-other-cpu.xml"
  keep_first_failure $?
  budget extended "$ext_start" "$REPORTS"/extended-*.xml
elif [[ "$MODE" == all ]]; then
  start=$SECONDS
  echo "== pytest -m '$SLOW_MARK and not alone'${PARALLEL:+ on $WORKERS workers}"
  .venv/bin/python -m pytest -m "$SLOW_MARK and not alone" "${PARALLEL[@]}" --durations=20 \
    --junitxml="$REPORTS/slow-shared.xml"
  keep_first_failure $?
fi
if [[ "$MODE" == slow || "$MODE" == all ]]; then
  # The slow tests marked `alone` (whole Ray clusters, SIGKILLed drivers and nodes, a measured process) run after
  # the others and never beside another test, whatever PIQAFORGE_TEST_WORKERS says.
  [[ "$MODE" == slow ]] && start=$SECONDS
  alone_mark="$SLOW_MARK and alone"
  [[ "$MODE" == slow ]] && alone_mark="$CI_SLOW_MARK and alone"
  echo "== pytest -m '$alone_mark', one at a time"
  .venv/bin/python -m pytest -m "$alone_mark" --durations=20 --junitxml="$REPORTS/slow-alone.xml"
  keep_first_failure $?
  if [[ "$MODE" == slow ]]; then budget slow-alone "$start" "$REPORTS/slow-alone.xml"
  else budget slow "$start" "$REPORTS/slow-shared.xml" "$REPORTS/slow-alone.xml"; fi
fi

if [[ "$MODE" == all ]]; then
  echo "== pytest -m 'recipes or rehearsal'"
  .venv/bin/python -m pytest -m "(recipes or rehearsal) and not vllm and not gpu and not storm" --durations=20
  keep_first_failure $?
elif [[ "$MODE" == rehearsal || "$MODE" == storm ]]; then
  (set -e; lint) || keep_first_failure $?
  echo "== pytest -m '$MODE'"
  .venv/bin/python -m pytest -m "$MODE" --durations=20
  keep_first_failure $?
fi

# Another CPU: a native kernel gives other floats on another CPU model, and CI runs on one. The tests marked
# `floats` (their outcome depends on an embedder's, a judge's or a kernel's floats) run twice more: with this
# machine's vectors moved by the measured cross-CPU gap and torch on its plain kernels, then with the bundles'
# vectors moved and torch on AVX2 kernels (tests/other_cpu/other_cpu_sim.py; Ray's workers play the same CPU
# through its sitecustomize.py). In --slow (CI's tier, .ci/run) and alone with --other-cpu.
if [[ "$MODE" == slow || "$MODE" == other-cpu ]]; then
  [[ "$MODE" == other-cpu ]] && { (set -e; lint) || keep_first_failure $?; }
  start=$SECONDS
  FLOAT_MARK="floats and not recipes and not vllm and not gpu and not storm and not rehearsal"
  [[ "$MODE" == slow ]] && FLOAT_MARK="$FLOAT_MARK and (not slow or ci)"  # CI: the extended ones play it in --extended
  # The tests marked `floats_heavy` (e5-torch over hundreds of texts: several minutes each on torch's plain kernels,
  # where bfloat16 also runs by conversion) play another CPU in the AVX2-kernel pass only; every other `floats` test
  # runs in both.
  for pass in "local default" "bundle avx2"; do
    read -r direction kernels <<<"$pass"
    mark="$FLOAT_MARK"
    [[ "$kernels" == default ]] && mark="$FLOAT_MARK and not floats_heavy"
    echo "== pytest -m floats, playing another CPU: ${direction} vectors moved, ATEN_CPU_CAPABILITY=${kernels}"
    PYTHONPATH="$ROOT/tests/other_cpu:$ROOT" PIQAFORGE_TEST_OTHER_CPU="$direction" ATEN_CPU_CAPABILITY="$kernels" \
      .venv/bin/python -m pytest -m "$mark" -q -p no:cacheprovider "${PARALLEL[@]}" \
      --junitxml="$REPORTS/other-cpu-$direction.xml"
    keep_first_failure $?
  done
  budget other-cpu "$start" "$REPORTS"/other-cpu-*.xml
fi
set -e
.venv/bin/python scripts/tier_budget.py total "$((SECONDS - t0))"
# pytest exits 5 when nothing was collected: that is a failure for CI, not a pass.
exit $rc
