# Sourced by the bench scripts: start a Tessera node or a redis-server on a free loopback port, stop it.
#
#   start_tessera_node LOG ARGS…    runs `node dist/main.js --port 0 ARGS…` with its output in LOG;
#                                   sets SERVER_PID, and PORT from its ready line
#   start_floor_server LOG          runs the floor server (bench/node-floor-server.ts) from .build/;
#                                   sets SERVER_PID and PORT
#   require_redis_tools NAME        exits 2 unless redis-server, redis-benchmark, redis-cli and node
#                                   are on PATH
#   log MESSAGE…                    prints a progress line on stderr
#   start_redis_server DIR FLAGS…   runs redis-server in DIR (its log in DIR/redis.log, no RDB
#                                   snapshots) with FLAGS; sets SERVER_PID and PORT
#   stop_server                     SIGTERM to SERVER_PID, waits for it, clears it
#   bench_workdir NAME              sets TMP to a new temp directory, removed on exit together with
#                                   any server still running
#
# A start that fails (the server exits, or is not ready in SERVER_READY_TIMEOUT_S) prints the
# server's log and returns 1.

SERVER_READY_TIMEOUT_S=${SERVER_READY_TIMEOUT_S:-30}

log() { printf '%s\n' "$*" >&2; }

start_tessera_node() {
  local log=$1
  shift
  node dist/main.js --port 0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  await_ready_port "$log" "tessera ($*)"
}

start_floor_server() {
  node .build/bench/node-floor-server.js >"$1" 2>&1 &
  SERVER_PID=$!
  await_ready_port "$1" 'the floor server'
}

# Sets PORT from the `"msg":"ready"` line the server SERVER_PID writes to log $1; $2 names it.
await_ready_port() {
  local deadline=$((SECONDS + SERVER_READY_TIMEOUT_S))
  PORT=
  until [ -n "$PORT" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      printf '%s did not start:\n' "$2" >&2
      cat "$1" >&2
      return 1
    fi
    sleep 0.1
    PORT=$(sed -n '/"msg":"ready"/s/.*"port":\([0-9]*\).*/\1/p' "$1" | head -1)
  done
}

# Exits with status 2 unless Redis's server and tools and node are on PATH; $1 names the script.
require_redis_tools() {
  local tool
  for tool in redis-server redis-benchmark redis-cli node; do
    command -v "$tool" >/dev/null 2>&1 || { printf '%s: %s is not on PATH\n' "$1" "$tool" >&2; exit 2; }
  done
}

start_redis_server() {
  local dir=$1
  shift
  mkdir -p "$dir"
  PORT=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
  redis-server --port "$PORT" --bind 127.0.0.1 --daemonize no --dir "$dir" --save '' \
    --logfile "$dir/redis.log" "$@" &
  SERVER_PID=$!
  local deadline=$((SECONDS + SERVER_READY_TIMEOUT_S))
  until [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      printf 'redis-server (%s) did not start:\n' "$*" >&2
      cat "$dir/redis.log" >&2
      return 1
    fi
    sleep 0.1
  done
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

bench_workdir() {
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/tessera-$1.XXXXXX")
  SERVER_PID=
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  if [ -n "$SERVER_PID" ]; then stop_server; fi
  rm -rf "$TMP"
}
