#!/usr/bin/env bash
# Worker scaling: the same node with 1, 2, 4, … worker threads, for machines with the cores for it.
# In one run, for each W in SCALING_WORKERS:
#   BENCH_WORKERS=W bash bench/redis-compare.sh    Tessera (lmdb) and redis-server over RESP, the pairs
#                                                   in BENCH_PAIRS (here "none everysec" unless set)
#   node .build/bench/embedded.bench.js W           the embedded API against lmdb in one process
#   node .build/bench/lmdb-groups.js W              (W > 1) W workers committing to one LMDB env for all,
#                                                   then to one env each, as the store lays them out
# each table under a heading; then, for each store in SCALING_STORES and each W, a fresh node at
# `store` durability under `redis-benchmark -t set,get -c 50 -r 100000 -d 100 -n SCALING_N`, once
# through the main port and once through the workers' own ports (`--worker-ports`, with
# `redis-benchmark --cluster`), pipelined (-P 16) and not (-P 1), beside redis-server (AOF
# everysec) under the same load, with each server's CPU time (user + system, every thread) per
# operation, in one table: the memory store has no write lock, so it tells the main thread's share
# of the scaling from LMDB's, and CPU per operation bounds throughput on any machine; then the same
# fresh servers under the load harness (YCSB A, `--cluster` through the worker ports), its rate,
# p99 and the CPU per operation; last, bench/hop-anatomy.sh (one
# worker: an unpipelined request's CPU and sleeps per server thread, against redis-server), which
# tells what a thread hop costs on the machine. Compare ratios and Tessera's own rows across W, not
# absolute figures across machines.
#
#   npm run build && npm run build:test && bash bench/worker-scaling.sh
#   SCALING_WORKERS="1 2 4 8 15" BENCH_CLIENT_THREADS=4 bash bench/worker-scaling.sh
#
# Environment: SCALING_WORKERS (default "1 2 4 8"), SCALING_EMBEDDED_MS (each embedded task's time
# per round, default 500), SCALING_STORES (default "memory lmdb"; empty skips the part),
# SCALING_N (requests per test of that part, default 600000), SCALING_HARNESS_KEYS (default
# 100000) and SCALING_HARNESS_DURATION (default 10s) for the harness's part, and redis-compare.sh's own
# (BENCH_N, BENCH_N_P1, BENCH_CLIENTS, BENCH_CLIENT_THREADS, BENCH_PAIRS, BENCH_TIMEOUT_S).
# SCALING_PARTS picks the parts, in their order (default all: "compare table harness anatomy";
# compare: the redis-compare, embedded and lmdb-groups runs per W; table: the fresh servers' table;
# harness: the load harness's table; anatomy: hop-anatomy.sh), e.g. SCALING_PARTS=table.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/servers.sh
source bench/servers.sh

WORKERS_LIST=${SCALING_WORKERS:-1 2 4 8}
STORES=${SCALING_STORES-memory lmdb}
N=${SCALING_N:-600000}
PARTS=${SCALING_PARTS:-compare table harness anatomy}
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
for part in $PARTS; do
  case $part in compare | table | harness | anatomy) ;; *) log "worker-scaling: SCALING_PARTS: unknown part '$part'"; exit 2 ;; esac
done
export BENCH_PAIRS=${BENCH_PAIRS:-none everysec}
CLIENT_THREADS=()
[ -n "${BENCH_CLIENT_THREADS:-}" ] && CLIENT_THREADS=(--threads "$BENCH_CLIENT_THREADS")

for w in $WORKERS_LIST; do
  [[ $w =~ ^[1-9][0-9]*$ ]] || { log "worker-scaling: SCALING_WORKERS: '$w' is not a worker count"; exit 2; }
done
for store in $STORES; do
  case $store in memory | lmdb | level) ;; *) log "worker-scaling: SCALING_STORES: unknown store '$store'"; exit 2 ;; esac
done
if [ ! -f .build/bench/embedded.bench.js ] || [ ! -f dist/main.js ]; then
  log "worker-scaling: dist/ or .build/ is missing; run npm run build && npm run build:test first"
  exit 2
fi

bench_workdir worker-scaling

log "worker-scaling: $(nproc) cores, node $(node --version), workers: $WORKERS_LIST, parts: $PARTS"
for w in $WORKERS_LIST; do
  has_part compare || break
  echo
  echo "### $w worker$([ "$w" = 1 ] || echo s): redis-benchmark, Tessera/redis-server"
  echo
  BENCH_WORKERS=$w bash bench/redis-compare.sh
  echo
  echo "### $w worker$([ "$w" = 1 ] || echo s): embedded API against lmdb"
  echo
  TESSERA_BENCH_MS=${SCALING_EMBEDDED_MS:-500} node .build/bench/embedded.bench.js "$w"
  if [ "$w" -gt 1 ]; then
    echo
    echo "### $w workers committing: one LMDB environment for all against one each (bench/lmdb-groups.ts)"
    echo
    node .build/bench/lmdb-groups.js "$w" 2000 3
  fi
done

anatomy() {
  has_part anatomy || return 0
  echo
  echo "### Where an unpipelined request's time goes (bench/hop-anatomy.sh, one worker)"
  echo
  ANATOMY_WORKERS=1 bash bench/hop-anatomy.sh
}

if [ -z "$STORES" ]; then
  anatomy
  exit 0
fi
TICKS_PER_S=$(getconf CLK_TCK)
echo
# CPU ticks of the server SERVER_PID: utime and stime of every thread, fields 14 and 15 of its stat.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$SERVER_PID/stat" 2>/dev/null || echo 0
}

# One load against the server SERVER_PID on PORT: a row of the table. $1: the row's first cells,
# $2: -P depth, the rest: redis-benchmark's extra options (--cluster).
measure() {
  local cells=$1 depth=$2
  shift 2
  local out set_rps get_rps cpu before
  before=$(cpu_ticks)
  out=$(redis-benchmark -h 127.0.0.1 -p "$PORT" "$@" -t set,get -P "$depth" -c 50 -r 100000 -d 100 -n "$N" \
    "${CLIENT_THREADS[@]}" --csv 2>&1 | tr -d '\r') || true
  set_rps=$(sed -n 's/^"SET","\([0-9.]*\)".*/\1/p' <<<"$out")
  get_rps=$(sed -n 's/^"GET","\([0-9.]*\)".*/\1/p' <<<"$out")
  cpu=$(awk -v t="$TICKS_PER_S" -v ops="$((2 * N))" -v d="$(($(cpu_ticks) - before))" \
    'BEGIN {printf "%.1f", d / t / ops * 1e6}')
  printf '| %s | %s | %.0f | %.0f | %s |\n' "$cells" "$depth" "${set_rps:-0}" "${get_rps:-0}" "$cpu"
}

# Starts a fresh node at `store` durability on $TMP/<store>-<workers>: $1 store, $2 workers, $3 main
# or workers (then with --worker-ports 0).
start_fresh_node() {
  local store=$1 w=$2 port=$3
  FRESH_DIR="$TMP/$store-$w"
  mkdir -p "$FRESH_DIR"
  local ports=()
  [ "$port" = workers ] && ports=(--worker-ports 0)
  start_tessera_node "$FRESH_DIR.log" --store "$store" --durability store --data-dir "$FRESH_DIR" --workers "$w" \
    "${ports[@]}"
}

stop_fresh_node() {
  stop_server
  rm -rf "$FRESH_DIR"
}

if has_part table; then
echo "### Fresh servers by worker count (\`store\` durability / AOF everysec, SET / GET, -n $N)"
echo
echo "| server | store | workers | port | -P | SET/s | GET/s | CPU µs/op |"
echo "|---|---|--:|---|--:|--:|--:|--:|"
for depth in 16 1; do
  for store in $STORES; do
    for w in $WORKERS_LIST; do
      for port in main workers; do
        log "worker-scaling: fresh node, --store $store --workers $w, $port port(s), -P $depth"
        start_fresh_node "$store" "$w" "$port" || exit 1
        if [ "$port" = main ]; then
          measure "tessera | $store | $w | main" "$depth"
        else
          if [ "$w" = 1 ]; then
            # redis-benchmark --cluster wants two primaries or more: the one worker's port, plainly.
            main_port=$PORT
            PORT=$(redis-cli -p "$PORT" cluster nodes | awk '{split($2, a, "[:@]"); print a[2]; exit}')
            measure "tessera | $store | $w | workers" "$depth"
            PORT=$main_port
          else
            measure "tessera | $store | $w | workers" "$depth" --cluster
          fi
        fi
        stop_fresh_node
      done
    done
  done
  start_redis_server "$TMP/redis-$depth" --appendonly yes --appendfsync everysec || exit 1
  measure "redis-server | aof | 1 | main" "$depth"
  stop_server
done
fi

# The load harness (YCSB A: 50 % GET, 50 % SET, zipfian) against a fresh server: its rate, p99 and
# the server's CPU per operation. $1: the row's first cells, the rest: the harness's extra options.
harness() {
  local cells=$1
  shift
  local json="$TMP/harness.json" before
  node .build/bench/load/main.js --port "$PORT" --workload a --keys "$HARNESS_KEYS" --load --quiet \
    --duration "$HARNESS_DURATION" --connections 50 --json "$json" "$@" >/dev/null || true
  before=$(cpu_ticks)
  node .build/bench/load/main.js --port "$PORT" --workload a --keys "$HARNESS_KEYS" --quiet \
    --duration "$HARNESS_DURATION" --connections 50 --json "$json" "$@" >/dev/null || true
  local after
  after=$(cpu_ticks)
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const [cells, ticks, hz] = process.argv.slice(2);
    const cpu = (Number(ticks) / Number(hz) / r.totals.ops) * 1e6;
    console.log(`| ${cells} | ${Math.round(r.totals.opsPerSec)} | ${(r.all.latencyUs.p99 / 1000).toFixed(2)} | ${cpu.toFixed(1)} | ${r.totals.errors} |`);
  ' "$json" "$cells" "$((after - before))" "$TICKS_PER_S"
}

HARNESS_KEYS=${SCALING_HARNESS_KEYS:-100000}
HARNESS_DURATION=${SCALING_HARNESS_DURATION:-10s}
if ! has_part harness; then
  anatomy
  exit 0
fi
echo
echo "### The load harness, workload a, 50 connections, -P 1 (\`store\` durability / AOF everysec, $HARNESS_DURATION)"
echo
echo "| server | store | workers | port | ops/s | p99 ms | CPU µs/op | errors |"
echo "|---|---|--:|---|--:|--:|--:|--:|"
for store in $STORES; do
  for w in $WORKERS_LIST; do
    for port in main workers; do
      log "worker-scaling: load harness, --store $store --workers $w, $port port(s)"
      start_fresh_node "$store" "$w" "$port" || exit 1
      if [ "$port" = main ]; then
        harness "tessera | $store | $w | main"
      else
        harness "tessera | $store | $w | workers" --cluster
      fi
      stop_fresh_node
    done
  done
done
start_redis_server "$TMP/redis-harness" --appendonly yes --appendfsync everysec || exit 1
harness "redis-server | aof | 1 | main"
stop_server
anatomy
