#!/usr/bin/env bash
# What the TTL cleaner costs an idle node: a node (lmdb, one worker) holding TTL_SWEEP_KEYS keys
# without a deadline and TTL_SWEEP_TTL_KEYS with a long one, sweeping every second
# (--clean-interval 1s); the CPU ticks (1/100 s) the whole process spends over 10 idle seconds.
# Given a second build's root directory, measures it the same way after this one, alternating
# TTL_SWEEP_ROUNDS times. TTL_SWEEP_FLAGS: more flags for this checkout's node only (such as
# `--clean-keys-per-sec 1000000000`, to measure the cleaner unpaced).
#
#   bash bench/ttl-sweep.sh [OTHER_BUILD_ROOT]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/servers.sh
KEYS=${TTL_SWEEP_KEYS:-190000}
TTL_KEYS=${TTL_SWEEP_TTL_KEYS:-10000}
ROUNDS=${TTL_SWEEP_ROUNDS:-2}
read -r -a THIS_FLAGS <<<"${TTL_SWEEP_FLAGS:-}"
bench_workdir ttl-sweep

# The load as RESP: SET key:N v, then SET ttl:N v EX 86400.
node -e '
  const [keys, ttlKeys] = process.argv.slice(1).map(Number);
  const cmd = (...a) => `*${a.length}\r\n` + a.map((x) => `$${Buffer.byteLength(x)}\r\n${x}\r\n`).join("");
  const out = [];
  for (let i = 0; i < keys; i++) out.push(cmd("SET", `key:${i}`, "v"));
  for (let i = 0; i < ttlKeys; i++) out.push(cmd("SET", `ttl:${i}`, "v", "EX", "86400"));
  process.stdout.write(out.join(""));
' "$KEYS" "$TTL_KEYS" >"$TMP/load.resp"

measure() {
  local root=$1 label=$2
  shift 2
  pushd "$root" >/dev/null
  start_tessera_node "$TMP/$label.log" --store lmdb --workers 1 --data-dir "$TMP/$label-data" --clean-interval 1s "$@"
  popd >/dev/null
  redis-cli -p "$PORT" --pipe <"$TMP/load.resp" >/dev/null
  sleep 3
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")
  sleep 10
  after=$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")
  echo "$label: $((after - before)) ticks in 10 s ($(redis-cli -p "$PORT" dbsize) keys)"
  stop_server
  rm -rf "$TMP/$label-data"
}

for r in $(seq 1 "$ROUNDS"); do
  measure . "this-$r" "${THIS_FLAGS[@]}"
  if [ $# -ge 1 ]; then measure "$1" "other-$r"; fi
done
