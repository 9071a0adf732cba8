#!/usr/bin/env bash
# Issue 14's table in one run: each row's benchmark, one after the other, on this machine, with
# the load average before each. Needs PostgreSQL and Redis (as .ci/run starts them) and
# `pip install -e '.[bench]'` (gunicorn). Output: var/bench/issue14-<time>.txt.
#   bash benchmarks/issue14_table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p var/bench
OUT="var/bench/issue14-$(date -u +%Y%m%dT%H%M%SZ).txt"
export IRIS_DATA_DIR="${IRIS_DATA_DIR:-$PWD/var/bench/data}"
export IRIS_BENCH_DATABASE_URL="${IRIS_BENCH_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/iris_bench}"
export IRIS_REDIS_URL="${IRIS_REDIS_URL:-redis://127.0.0.1:6379/9}"

step() { printf '\n## %s\n$ %s\nload: %s\n' "$1" "${*:2}" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"; "${@:2}" 2>&1 | tee -a "$OUT" || echo "(exit status $?: a target missed or a failure, above)" | tee -a "$OUT"; }

step "decide, synthetic mix" $PY benchmarks/bench_decision.py --sizes 100000x10000 --runs 3
step "decide, squatters mix" $PY benchmarks/bench_decision.py --sizes 100000x10000 --runs 3 --mix squatters --squat-share 0.2 0.5 0.8
[ -f var/bench/snap100k.json ] || $PY -c "import json; from benchmarks.synthetic import generate; \
json.dump(generate(pending=100000, workers=10000, seed=0), open('var/bench/snap100k.json', 'w'))"
for i in 1 2 3; do
  step "simulate, whole process (run $i)" bash -c "/usr/bin/time -f 'wall %e s, user %U s, sys %S s, maxrss %M KB' \
    $PY manage.py simulate --indent 0 var/bench/snap100k.json > /dev/null"
done
step "ticks: first (a new process), churn, unchanged, burst (a warm process)" $PY benchmarks/bench_tick.py --sizes 100000x10000 --ticks first second unchanged churn burst
step "console pages and API lists, what-if" $PY benchmarks/bench_console.py --sizes 100000x10000 --requests 5
step "submissions with a tick worker" $PY benchmarks/bench_api.py --submissions 4000 --seconds 30 --cluster 30000x3000
echo "written: $OUT"
