#!/usr/bin/env bash
# Worker scaling: the same node with 1, 2, 4, … worker threads, for machines with the cores for it.
# For each W in SCALING_WORKERS, in one run:
#   BENCH_WORKERS=W bash bench/redis-compare.sh    Tessera (lmdb) and redis-server over RESP, the pairs
#                                                   in BENCH_PAIRS (here "none everysec" unless set)
#   node .build/bench/embedded.bench.js W           the embedded API against lmdb in one process
# and prints each table under a heading. Every ratio in a table comes from one run on one machine;
# compare the ratios (and Tessera's own rows) across W, not absolute figures across machines.
#
#   npm run build && npm run build:test && bash bench/worker-scaling.sh
#   SCALING_WORKERS="1 2 4 8 15" BENCH_CLIENT_THREADS=4 bash bench/worker-scaling.sh
#
# Environment: SCALING_WORKERS (default "1 2 4 8"), SCALING_EMBEDDED_MS (each embedded task's time
# per round, default 500), and redis-compare.sh's own (BENCH_N, BENCH_N_P1, BENCH_CLIENTS,
# BENCH_CLIENT_THREADS, BENCH_PAIRS, BENCH_TIMEOUT_S).
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS_LIST=${SCALING_WORKERS:-1 2 4 8}
export BENCH_PAIRS=${BENCH_PAIRS:-none everysec}

log() { printf '%s\n' "$*" >&2; }

for w in $WORKERS_LIST; do
  [[ $w =~ ^[1-9][0-9]*$ ]] || { log "worker-scaling: SCALING_WORKERS: '$w' is not a worker count"; exit 2; }
done
if [ ! -f .build/bench/embedded.bench.js ]; then
  log "worker-scaling: .build/ is missing; run npm run build:test first"
  exit 2
fi

log "worker-scaling: $(nproc) cores, node $(node --version), workers: $WORKERS_LIST"
for w in $WORKERS_LIST; do
  echo
  echo "### $w worker$([ "$w" = 1 ] || echo s): redis-benchmark, Tessera/redis-server"
  echo
  BENCH_WORKERS=$w bash bench/redis-compare.sh
  echo
  echo "### $w worker$([ "$w" = 1 ] || echo s): embedded API against lmdb"
  echo
  TESSERA_BENCH_MS=${SCALING_EMBEDDED_MS:-500} node .build/bench/embedded.bench.js "$w"
done
