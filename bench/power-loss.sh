#!/usr/bin/env bash
# The long run of the power-loss simulator (test/crash/power-loss.ts): for each store and durability
# level, POWER_LOSS_STATES crash states (default 1000) over POWER_LOSS_RECORDINGS recordings of a
# node killed mid-write on the FUSE recorder, and the same for LMDB's write-map mode, which the
# lmdb store used before and which the simulator must find damaged. Needs root and /dev/fuse.
# Prints one line per recording, and a total per scenario; exits non-zero if a node's state failed.
#
#   bash bench/power-loss.sh
#   POWER_LOSS_STATES=200 POWER_LOSS_SEED=5 POWER_LOSS_SCENARIOS="lmdb/stable level/store" bash bench/power-loss.sh
set -euo pipefail
cd "$(dirname "$0")/.."

STATES=${POWER_LOSS_STATES:-1000}
RECORDINGS=${POWER_LOSS_RECORDINGS:-10}
SEED=${POWER_LOSS_SEED:-1}
SCENARIOS=${POWER_LOSS_SCENARIOS:-lmdb/memory lmdb/store lmdb/stable level/memory level/store level/stable writemap}

npm run --silent build:test >&2
failed=0
for scenario in $SCENARIOS; do
  echo "== $scenario"
  if [ "$scenario" = writemap ]; then
    # Expected to fail: the run shows how many of its states the old mode damages.
    node .build/test/crash/power-loss.js --subject raw-lmdb-writemap --seed "$SEED" \
      --states "$STATES" --recordings "$RECORDINGS" --writes 24000 2>/dev/null | grep -v '^    replay:' | grep -v '^  state seed' || true
    continue
  fi
  node .build/test/crash/power-loss.js --subject node --store "${scenario%/*}" --durability "${scenario#*/}" \
    --seed "$SEED" --states "$STATES" --recordings "$RECORDINGS" --writes 12000 || failed=1
done
exit $failed
