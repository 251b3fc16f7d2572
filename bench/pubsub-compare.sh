#!/usr/bin/env bash
# PUBLISH throughput, Tessera against redis-server, measured by redis-benchmark on loopback:
#
#   redis-benchmark -c C -P 16 -n N PUBLISH bench <100 bytes>
#
# with 0, then S subscribers on the channel (bench/pubsub-subscribers.ts, one process holding S
# connections), against redis-server without persistence and a Tessera node (lmdb, memory
# durability, one worker) running side by side. Each measurement runs against one server and then
# the other, in two rounds; the better round of each counts. Every message must reach every
# subscriber (checked). Prints one markdown table on stdout.
#
#   bash bench/pubsub-compare.sh
#   BENCH_N=400000 BENCH_SUBSCRIBERS=50 bash bench/pubsub-compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."

N=${BENCH_N:-200000}
CLIENTS=${BENCH_CLIENTS:-50}
SUBSCRIBERS=${BENCH_SUBSCRIBERS:-10}
# shellcheck source=bench/servers.sh
source bench/servers.sh

for tool in redis-server redis-benchmark redis-cli node; do
  command -v "$tool" >/dev/null 2>&1 || { log "pubsub-compare: $tool is not on PATH"; exit 2; }
done
npm run --silent build >&2
npm run --silent build:test >&2

bench_workdir pubsub-compare
start_redis_server "$TMP/redis" --appendonly no || exit 1
REDIS_PID=$SERVER_PID REDIS_PORT=$PORT
start_tessera_node "$TMP/tessera.log" --store lmdb --durability memory --workers 1 --data-dir "$TMP/tessera" || exit 1
TESSERA_PID=$SERVER_PID TESSERA_PORT=$PORT
SERVER_PID=
trap 'kill $REDIS_PID $TESSERA_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT

MESSAGE=$(printf 'x%.0s' $(seq 1 100))
declare -A BEST

# measure PORT SUBSCRIBERS: requests per second of one redis-benchmark run; checks delivery.
measure() {
  local port=$1 subs=$2 out rps fifo="$TMP/subs.out"
  node .build/bench/pubsub-subscribers.js "$port" "$subs" bench 100 >"$fifo" &
  local subs_pid=$!
  until grep -q ready "$fifo" 2>/dev/null; do sleep 0.05; done
  out=$(redis-benchmark -p "$port" -c "$CLIENTS" -P 16 -n "$N" -q PUBLISH bench "$MESSAGE" 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
  rps=$(sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' <<<"$out")
  sleep 0.5
  kill -TERM "$subs_pid"
  wait "$subs_pid" || true
  local delivered
  delivered=$(sed -n 's/.*"messages":\([0-9.]*\).*/\1/p' "$fifo")
  if [ "$delivered" != "$((N * subs))" ]; then
    log "pubsub-compare: port $port, $subs subscribers: $delivered messages delivered, expected $((N * subs))"
    exit 1
  fi
  printf '%s\n' "${rps%.*}"
}

for round in 1 2; do
  for subs in 0 "$SUBSCRIBERS"; do
    for server in redis tessera; do
      port=$REDIS_PORT
      [ $server = tessera ] && port=$TESSERA_PORT
      rps=$(measure "$port" "$subs")
      log "round $round, $server, $subs subscribers: $rps PUBLISH/s"
      key="$server $subs"
      if [ -z "${BEST[$key]:-}" ] || [ "$rps" -gt "${BEST[$key]}" ]; then BEST[$key]=$rps; fi
    done
  done
done

printf '| subscribers | redis-server PUBLISH/s | Tessera PUBLISH/s | Tessera/redis |\n|--:|--:|--:|--:|\n'
for subs in 0 "$SUBSCRIBERS"; do
  r=${BEST[redis $subs]} t=${BEST[tessera $subs]}
  printf '| %s | %s | %s | %s× |\n' "$subs" "$r" "$t" "$(node -e "console.log(($t / $r).toFixed(2))")"
done
