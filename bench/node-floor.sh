#!/usr/bin/env bash
# What Node.js itself costs a Redis-protocol server on this machine: redis-server without
# persistence, the floor server (`bench/node-floor-server.ts`: a Map behind one `data` handler, no
# storage) and Tessera (`--store lmdb --durability memory`, one worker), all three running side by
# side and measured in turns by the same redis-benchmark runs:
#
#   redis-benchmark -t OP -P P -c C -r 100000 -d 100 -n N      OP in ping_mbulk, set, get; P in 1, 16
#
# PING is the runtime alone: a socket's read, one reply, its write.
#
# Each server is warmed first by a pipelined SET run over the key space (so GETs hit and the JIT
# has run). Prints one markdown table per round on stdout: each server's requests/s, and the
# ratios floor/redis (what any Node server could reach here), tessera/redis and tessera/floor
# (what Tessera's own work costs beyond the runtime's).
#
#   npm run build && npm run build:test && bash bench/node-floor.sh
#   FLOOR_ROUNDS=3 FLOOR_N_P1=400000 bash bench/node-floor.sh
#
# Environment: FLOOR_ROUNDS (default 2), FLOOR_N_P1 (unpipelined requests per run, default 200000),
# FLOOR_N_P16 (pipelined, default 1000000), FLOOR_CLIENTS (default 50).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/servers.sh
source bench/servers.sh

ROUNDS=${FLOOR_ROUNDS:-2}
N_P1=${FLOOR_N_P1:-200000}
N_P16=${FLOOR_N_P16:-1000000}
CLIENTS=${FLOOR_CLIENTS:-50}
KEYS=100000

require_redis_tools node-floor
[ -f dist/main.js ] || { log "node-floor: dist/ is missing; run npm run build first"; exit 2; }
[ -f .build/bench/node-floor-server.js ] || { log "node-floor: .build/ is missing; run npm run build:test first"; exit 2; }

bench_workdir node-floor
PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  bench_cleanup
}
trap stop_all EXIT

start_redis_server "$TMP/redis" --appendonly no
REDIS_PORT=$PORT
PIDS+=("$SERVER_PID")

start_floor_server "$TMP/floor.log"
FLOOR_PORT=$PORT
PIDS+=("$SERVER_PID")

start_tessera_node "$TMP/tessera.log" --store lmdb --durability memory --workers 1 --data-dir "$TMP/tessera"
TESSERA_PORT=$PORT
PIDS+=("$SERVER_PID")
SERVER_PID=

# Requests per second of one redis-benchmark run: port, op, pipeline depth, requests.
rate() {
  redis-benchmark -p "$1" -t "$2" -P "$3" -c "$CLIENTS" -r "$KEYS" -d 100 -n "$4" -q 2>/dev/null |
    tr '\r' '\n' | sed -n 's/^[A-Z_]*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}

for port in "$REDIS_PORT" "$FLOOR_PORT" "$TESSERA_PORT"; do
  log "node-floor: warming the server on port $port"
  rate "$port" set 16 "$N_P16" >/dev/null
done

for round in $(seq 1 "$ROUNDS"); do
  log "node-floor: round $round of $ROUNDS"
  echo
  echo "Round $round (-c $CLIENTS -r $KEYS -d 100; requests/s)"
  echo
  echo "| -P | op | redis-server | floor | tessera | floor/redis | tessera/redis | tessera/floor |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|"
  for pipeline in 1 16; do
    n=$N_P1
    [ "$pipeline" = 1 ] || n=$N_P16
    for op in ping_mbulk set get; do
      r=$(rate "$REDIS_PORT" "$op" "$pipeline" "$n")
      f=$(rate "$FLOOR_PORT" "$op" "$pipeline" "$n")
      t=$(rate "$TESSERA_PORT" "$op" "$pipeline" "$n")
      awk -v p="$pipeline" -v op="$op" -v r="$r" -v f="$f" -v t="$t" 'BEGIN {
        name = op == "ping_mbulk" ? "PING" : toupper(op)
        printf "| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", p, name, r, f, t, f / r, t / r, t / f
      }'
    done
  done
done
