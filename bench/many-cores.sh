#!/usr/bin/env bash
# The benchmarks whose goals need a core per node or per worker (bench/RESULTS.md, "Where the
# goals stand"), in parts that each finish in a few minutes on a 16-core machine, so a machine lent
# for a short while can run them one call at a time. Each part writes its full output to
# OUT_DIR/<part>.txt and prints its summary lines.
#
#   bash bench/many-cores.sh bundle         here: build, and put the packages the benchmarks run
#                                           with (no compiler, linter or type definitions) in
#                                           .bench-bundle/, for a machine without the registry:
#                                           copy .build, dist and .bench-bundle with the sources
#   bash bench/many-cores.sh PART [PART…]   there: join, down, acks, scaling (each below)
#
#   join     a fourth node joins three under load (bench/moves.ts, --parts join): closed loop with
#            --after 20s, then open loop at MANY_CORES_RATE (default 1500) ops/s; the dip ≤ 15 % and
#            p99 ≤ 2× goals. With 16 cores or more each node runs on three of its own
#            (--node-cores) and the clients on the rest
#   down     4 nodes of MANY_CORES_MIB (default 1024) MiB each, one SIGKILLed: Down to every
#            fragment back at R replicas (goal ≤ 60 s for 1 GiB) and the failover catch-up (≤ 1 s)
#   acks     SET + WAIT 2 0 at -P1 (goal p99 ≤ 2 ms) and --replica-acks 1 and 2 against 0 (≥ 0.7)
#            (bench/replica-acks.ts)
#   scaling  fresh nodes with MANY_CORES_WORKERS (default "1 2 4 8") workers through the main port
#            and the workers' own ports, beside redis-server, with CPU per operation
#            (bench/worker-scaling.sh's table part, SCALING_N=MANY_CORES_N, default 300000)
#
# OUT_DIR defaults to $OUT when that is set, else .tmp/many-cores. Each part runs under a timeout
# (MANY_CORES_TIMEOUT_S, default 540 s) and the script goes on to the next part if one fails.
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '%s\n' "$*" >&2; }

if [ $# -eq 0 ]; then
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi

if [ "$1" = bundle ]; then
  npm run build && npm run build:test || exit 1
  rm -rf .bench-bundle && mkdir -p .bench-bundle
  tar -C . -cf - --exclude='node_modules/@biomejs' --exclude='node_modules/@typescript' \
    --exclude='node_modules/typescript' --exclude='node_modules/@types' node_modules | tar -C .bench-bundle -xf -
  log "many-cores: .bench-bundle/node_modules holds $(du -sh .bench-bundle | cut -f1); with .build and dist:"
  du -shc .build dist .bench-bundle | tail -1 >&2
  exit 0
fi

for part in "$@"; do
  case $part in join | down | acks | scaling) ;; *) log "many-cores: unknown part '$part' (join, down, acks, scaling, or bundle)"; exit 2 ;; esac
done
if [ ! -e node_modules ] && [ -d .bench-bundle/node_modules ]; then ln -s .bench-bundle/node_modules node_modules; fi
if [ ! -f .build/bench/moves.js ] || [ ! -f dist/main.js ] || [ ! -d node_modules/lmdb ]; then
  log "many-cores: .build, dist or node_modules is missing: run 'npm ci && bash bench/many-cores.sh bundle' first"
  exit 2
fi

OUT_DIR=${OUT:-.tmp/many-cores}
mkdir -p "$OUT_DIR"
TIMEOUT_S=${MANY_CORES_TIMEOUT_S:-540}
log "many-cores: $(nproc) cores, node $(node --version), output in $OUT_DIR"
[ "$(nproc)" -ge 8 ] || log "many-cores: fewer than 8 cores: the figures will not show what these goals are about"

# Runs a part's command with the timeout, its output in OUT_DIR/$1.txt; prints the lines matching $2.
run_part() {
  local name=$1 pattern=$2
  shift 2
  log "many-cores: $name: $*"
  local started=$SECONDS
  timeout "$TIMEOUT_S" "$@" >"$OUT_DIR/$name.txt" 2>&1
  local rc=$?
  printf '== %s (rc %d, %d s)\n' "$name" "$rc" $((SECONDS - started))
  grep -E "$pattern" "$OUT_DIR/$name.txt" || tail -5 "$OUT_DIR/$name.txt"
}

for part in "$@"; do
  case $part in
  join)
    # With 16 cores or more, each node gets three of its own and the clients the rest, as four
    # machines and a client would have.
    pin=() bench=()
    if [ "$(nproc)" -ge 16 ]; then pin=(--node-cores 0-2:3-5:6-8:9-11) bench=(taskset -c "12-$(($(nproc) - 1))"); fi
    run_part join-closed '^(Before|Join to|After|Time|Replica moves|CPU per|Client errors)' \
      "${bench[@]}" node .build/bench/moves.js --parts join --after 20s "${pin[@]}"
    run_part join-open '^(Before|Join to|After|Time|Replica moves|CPU per|Client errors)' \
      "${bench[@]}" node .build/bench/moves.js --parts join --rate "${MANY_CORES_RATE:-1500}" --after 10s "${pin[@]}"
    ;;
  down)
    run_part down '^(Held|Before the kill|From the kill|Down to none|The survivors|Projection|Catch-up|Replica moves)|loaded' \
      node .build/bench/moves.js --parts down --mib-per-node "${MANY_CORES_MIB:-1024}"
    ;;
  acks)
    run_part acks '.' env BENCH_ACKS_SECONDS="${BENCH_ACKS_SECONDS:-4}" node .build/bench/replica-acks.js
    ;;
  scaling)
    run_part scaling '^\|' env SCALING_PARTS=table SCALING_WORKERS="${MANY_CORES_WORKERS:-1 2 4 8}" \
      SCALING_N="${MANY_CORES_N:-300000}" BENCH_CLIENT_THREADS=4 bash bench/worker-scaling.sh
    ;;
  esac
done
