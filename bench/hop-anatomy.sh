#!/usr/bin/env bash
# Where a request's time goes: Tessera (lmdb, `store`) and redis-server (AOF everysec) under
# `redis-benchmark -t OP -P P -c C -r 100000 -d D -n N`, with each server thread's CPU time and
# sleeps per request, read from /proc (Linux) around each run, and the client's own CPU time.
#
# A Tessera SET crosses four thread wake-ups (client → main thread → worker → main thread →
# client), a GET of a committed key two (served on the main thread), a redis-server request two.
# With one client nothing overlaps, so the rate is one over the sum of those hops; the CPU per
# request shows what each wake-up costs on the machine. Pipelined (ANATOMY_PIPELINE=16) the hops
# are shared by many requests and the CPU per request shows the work itself: the busiest thread
# besides the main one is Tessera's worker. Each server starts fresh and is warmed by a pipelined
# SET run over the key space first (so GETs hit).
#
#   npm run build && bash bench/hop-anatomy.sh
#   ANATOMY_CLIENTS="1 50" ANATOMY_N=50000 bash bench/hop-anatomy.sh
#   ANATOMY_PIPELINE=16 ANATOMY_CLIENTS=50 ANATOMY_N=400000 bash bench/hop-anatomy.sh
#   ANATOMY_PIPELINE=16 ANATOMY_CLIENTS=50 ANATOMY_VALUE_BYTES=4096 bash bench/hop-anatomy.sh
#
# Environment: ANATOMY_CLIENTS (default "1 50"), ANATOMY_N (requests per run, default 20000),
# ANATOMY_PIPELINE (requests per client in flight, default 1), ANATOMY_VALUE_BYTES (SET value
# size, default 100), ANATOMY_WORKERS (Tessera worker threads, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/servers.sh
source bench/servers.sh

CLIENTS_LIST=${ANATOMY_CLIENTS:-1 50}
N=${ANATOMY_N:-20000}
PIPELINE=${ANATOMY_PIPELINE:-1}
WORKERS=${ANATOMY_WORKERS:-1}
VALUE_BYTES=${ANATOMY_VALUE_BYTES:-100}
WARM_N=200000

require_redis_tools hop-anatomy
[ -d /proc/self/task ] || { log "hop-anatomy: needs Linux /proc"; exit 2; }
[ -f dist/main.js ] || { log "hop-anatomy: dist/ is missing; run npm run build first"; exit 2; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# `time` reports the client's user and system seconds, for client_per_request.
TIMEFORMAT='%3U %3S'

bench_workdir hop-anatomy

# One line per thread of SERVER_PID: "main|other ticks voluntary-switches" (ticks: user + system).
# The thread name may hold spaces, so /proc/…/stat is read from after its closing parenthesis.
thread_stats() {
  local t tid ticks sleeps
  for t in /proc/"$SERVER_PID"/task/*; do
    tid=${t##*/}
    ticks=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }') || continue
    sleeps=$(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status" 2>/dev/null) || continue
    [ -n "$ticks" ] && [ -n "$sleeps" ] || continue
    if [ "$tid" = "$SERVER_PID" ]; then echo "main $tid $ticks $sleeps"; else echo "other $tid $ticks $sleeps"; fi
  done
}

# Per-request CPU µs of the main thread, of the busiest other thread and of the rest, then the
# sleeps of the main thread and of the others, between two thread_stats.
per_request() {
  awk -v n="$N" -v tick="$TICK_US" '
    FNR == NR { t[$2] = $3; s[$2] = $4; next }
    {
      dt = $3 - t[$2]; ds = $4 - s[$2]; cpu[$1] += dt; sl[$1] += ds
      if ($1 == "other" && dt > busiest) busiest = dt
    }
    END {
      printf "%.2f | %.2f | %.2f | %.3f | %.3f", cpu["main"] * tick / n, busiest * tick / n,
        (cpu["other"] - busiest) * tick / n, sl["main"] / n, sl["other"] / n
    }
  ' "$1" "$2"
}

# The client's CPU µs per request (user + system), from bash's `time` of its run.
client_per_request() {
  awk -v n="$N" '{ printf "%.2f", ($1 + $2) * 1e6 / n }' "$1"
}

declare -A RPS ROW
run_server() {
  local server=$1 c op out rps
  redis-benchmark -h 127.0.0.1 -p "$PORT" -t set -P 16 -c 50 -r 100000 -d "$VALUE_BYTES" -n "$WARM_N" -q >/dev/null
  for c in $CLIENTS_LIST; do
    for op in set get; do
      thread_stats >"$TMP/before"
      { time redis-benchmark -h 127.0.0.1 -p "$PORT" -t "$op" -P "$PIPELINE" -c "$c" -r 100000 -d "$VALUE_BYTES" -n "$N" \
        --csv >"$TMP/out"; } 2>"$TMP/time"
      thread_stats >"$TMP/after"
      rps=$(tr -d '\r' <"$TMP/out" | sed -n 's/^"[A-Z]*","\([0-9.]*\)".*/\1/p' | tail -1)
      RPS["$server $op $c"]=$rps
      ROW["$server $op $c"]="$(per_request "$TMP/before" "$TMP/after") | $(client_per_request "$TMP/time")"
    done
  done
}

log "hop-anatomy: $(nproc) cores, node $(node --version), $(redis-server --version | cut -d' ' -f1-3), -P $PIPELINE, -n $N, clients: $CLIENTS_LIST"
start_redis_server "$TMP/redis" --appendonly yes --appendfsync everysec || exit 1
run_server redis
stop_server
start_tessera_node "$TMP/tessera.log" --store lmdb --durability store --data-dir "$TMP/tessera" --workers "$WORKERS" || exit 1
run_server tessera
stop_server

echo "| server | op | clients × pipeline | requests/s | tessera/redis | main thread CPU µs/req | busiest other thread CPU µs/req | rest CPU µs/req | main thread sleeps/req | other threads sleeps/req | client CPU µs/req |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
for c in $CLIENTS_LIST; do
  for op in SET GET; do
    lower=${op,,}
    r=${RPS["redis $lower $c"]}
    s=${RPS["tessera $lower $c"]}
    ratio=$(awk -v r="$r" -v s="$s" 'BEGIN { printf "%.2f", (r > 0 ? s / r : 0) }')
    printf '| redis-server (AOF everysec) | %s | %s × %s | %.0f | | %s |\n' "$op" "$c" "$PIPELINE" "$r" "${ROW["redis $lower $c"]}"
    printf '| Tessera (%s worker%s, store) | %s | %s × %s | %.0f | %s | %s |\n' "$WORKERS" "$([ "$WORKERS" = 1 ] || echo s)" \
      "$op" "$c" "$PIPELINE" "$s" "$ratio" "${ROW["tessera $lower $c"]}"
  done
done
