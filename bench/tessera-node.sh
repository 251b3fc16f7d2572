# Sourced by the bench scripts: start a Tessera node from dist/ on a free port, and stop a server.
#
#   start_tessera_node LOG ARGS…   runs `node dist/main.js --port 0 ARGS…` with its output in LOG;
#                                  sets SERVER_PID, and PORT from its ready line; returns 1 (after
#                                  printing LOG) if it exits or is not ready in TESSERA_READY_TIMEOUT_S
#   stop_server                    SIGTERM to SERVER_PID, waits for it, clears it

TESSERA_READY_TIMEOUT_S=${TESSERA_READY_TIMEOUT_S:-30}

start_tessera_node() {
  local log=$1
  shift
  node dist/main.js --port 0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  local deadline=$((SECONDS + TESSERA_READY_TIMEOUT_S))
  PORT=
  until [ -n "$PORT" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      printf 'tessera (%s) did not start:\n' "$*" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
    PORT=$(sed -n '/"msg":"ready"/s/.*"port":\([0-9]*\).*/\1/p' "$log" | head -1)
  done
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}
