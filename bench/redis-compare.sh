#!/usr/bin/env bash
# Tessera against redis-server, measured by redis-benchmark on loopback, at matching durability:
#
#   redis-server                                     tessera --store lmdb
#   --save '' --appendonly no                        --durability memory
#   --appendonly yes --appendfsync everysec          --durability store
#   --appendonly yes --appendfsync always            --durability stable
#
# Each server starts fresh in a temp directory and gets the same two runs:
#   redis-benchmark -t set,get,mset -P 16 -c C -r 100000 -d 100 -n N   (pipelined)
#   redis-benchmark -t set,get      -P 1  -c C -r 100000 -d 100 -n M   (one request per round trip)
# Prints one markdown table on stdout (progress goes to stderr). About two minutes with the defaults.
#
#   npm run bench:redis
#   BENCH_N=500000 BENCH_N_P1=100000 BENCH_WORKERS=4 bash bench/redis-compare.sh
#
# Environment: BENCH_N (pipelined requests per test, default 100000), BENCH_N_P1 (unpipelined,
# default 20000), BENCH_CLIENTS (default 50), BENCH_WORKERS (Tessera worker threads, default 2),
# BENCH_PAIRS (subset of "none everysec always"), BENCH_TIMEOUT_S (per redis-benchmark run, 600),
# BENCH_CLIENT_THREADS (redis-benchmark --threads; unset: one client thread).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${BENCH_N:-100000}
N_P1=${BENCH_N_P1:-20000}
CLIENTS=${BENCH_CLIENTS:-50}
WORKERS=${BENCH_WORKERS:-2}
PAIRS=${BENCH_PAIRS:-none everysec always}
TIMEOUT_S=${BENCH_TIMEOUT_S:-600}
CLIENT_THREADS=()
[ -n "${BENCH_CLIENT_THREADS:-}" ] && CLIENT_THREADS=(--threads "$BENCH_CLIENT_THREADS")
# shellcheck source=bench/servers.sh
source bench/servers.sh

for tool in redis-server redis-benchmark redis-cli node; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    log "redis-compare: $tool is not on PATH."
    if [ "$tool" != node ]; then
      log "Install Redis's server and tools, e.g. on Debian or Ubuntu:"
      log "  apt-get install -y redis-server redis-tools    (sudo apt-get … when not root)"
    fi
    exit 2
  fi
done

for pair in $PAIRS; do
  case $pair in none | everysec | always) ;; *) log "redis-compare: BENCH_PAIRS: unknown pair '$pair'"; exit 2 ;; esac
done

# Build dist/ when it is missing or older than any source file.
if [ ! -f dist/main.js ] || [ -n "$(find src -name '*.ts' -newer dist/main.js -print -quit)" ]; then
  log "redis-compare: building dist/ (npm run build)"
  npm run --silent build >&2
fi

bench_workdir redis-compare

# Starts redis-server with the persistence flags of pair $1; sets SERVER_PID and PORT.
start_redis() {
  local flags
  case $1 in
    none) flags=(--appendonly no) ;;
    everysec) flags=(--appendonly yes --appendfsync everysec) ;;
    always) flags=(--appendonly yes --appendfsync always) ;;
  esac
  start_redis_server "$TMP/redis-$1" "${flags[@]}" || exit 1
}

# Starts Tessera at the durability matching pair $1; sets SERVER_PID and PORT.
start_tessera() {
  local level dir="$TMP/tessera-$1"
  case $1 in none) level=memory ;; everysec) level=store ;; always) level=stable ;; esac
  mkdir -p "$dir"
  start_tessera_node "$dir.log" --store lmdb --durability "$level" --data-dir "$dir" --workers "$WORKERS" || exit 1
}

# Results: RPS["<server> <pair> <test>"] = requests per second, or "error".
declare -A RPS
TESTS=("SET -P 16" "GET -P 16" "MSET (10 keys) -P 16" "SET -P 1" "GET -P 1")

# One redis-benchmark run against PORT; records each test's rps for server $1, pair $2, pipeline $3.
# --csv prints one final line per test ("SET","123456.78",…) and none of -q's CR progress lines.
bench() {
  local server=$1 pair=$2 pipeline=$3 tests=$4 n=$5 out line name rps
  if ! out=$(timeout "$TIMEOUT_S" redis-benchmark -h 127.0.0.1 -p "$PORT" -t "$tests" -P "$pipeline" \
    -c "$CLIENTS" -r 100000 -d 100 -n "$n" "${CLIENT_THREADS[@]}" --csv 2>&1); then
    log "redis-compare: redis-benchmark failed against $server ($pair, -P $pipeline):"
    log "$out"
    for name in ${tests//,/ }; do
      [ "$name" = mset ] && name="MSET (10 keys)" || name=${name^^}
      RPS["$server $pair $name -P $pipeline"]=error
    done
    return 0
  fi
  while IFS= read -r line; do
    line=${line//$'\r'/}
    [[ $line =~ ^\"([^\"]+)\",\"([0-9.]+)\" ]] || continue
    name=${BASH_REMATCH[1]}
    rps=${BASH_REMATCH[2]}
    RPS["$server $pair $name -P $pipeline"]=$rps
  done <<<"$out"
}

log "redis-compare: $(redis-server --version | cut -d' ' -f1-3), node $(node --version), $(nproc) cores," \
  "tessera workers=$WORKERS, clients=$CLIENTS, client threads=${BENCH_CLIENT_THREADS:-1}, -n $N (pipelined) / $N_P1 (unpipelined)"
for pair in $PAIRS; do
  for server in redis tessera; do
    log "redis-compare: $server, durability pair '$pair'"
    if [ "$server" = redis ]; then start_redis "$pair"; else start_tessera "$pair"; fi
    bench "$server" "$pair" 16 set,get,mset "$N"
    bench "$server" "$pair" 1 set,get "$N_P1"
    stop_server
  done
done

declare -A TESSERA_LEVEL=([none]=memory [everysec]=store [always]=stable)
declare -A REDIS_MODE=([none]="no persistence" [everysec]="AOF everysec" [always]="AOF always")
echo "| test | durability (redis / tessera) | redis rps | tessera rps | tessera/redis |"
echo "|---|---|--:|--:|--:|"
for pair in $PAIRS; do
  for t in "${TESTS[@]}"; do
    r=${RPS["redis $pair $t"]:-}
    s=${RPS["tessera $pair $t"]:-}
    [ -n "$r$s" ] || continue
    awk -v t="$t" -v d="${REDIS_MODE[$pair]} / ${TESSERA_LEVEL[$pair]}" -v r="${r:-n/a}" -v s="${s:-n/a}" '
      function fmt(x) { return x ~ /^[0-9.]+$/ ? sprintf("%.0f", x) : x }
      BEGIN {
        ratio = (r ~ /^[0-9.]+$/ && s ~ /^[0-9.]+$/ && r > 0) ? sprintf("%.2f", s / r) : "n/a"
        printf "| %s | %s | %s | %s | %s |\n", t, d, fmt(r), fmt(s), ratio
      }'
  done
done
