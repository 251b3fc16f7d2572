// Power loss (README "Durability"), by the crash-state simulator (test/crash/power-loss.ts): a node
// writes on the FUSE recorder at each durability level, is killed, and restarts on crash states of
// what the disk could hold — nothing unsynced, everything, in-order prefixes, random subsets of
// unsynced pages, torn sectors. On every state the store must open, serve no value that was never
// written, and hold every write acknowledged at `stable` before the crash (or a later one of its
// key). The simulator must also find the damage LMDB's write-map mode allows, which the lmdb store
// used before: otherwise its clean verdicts would mean nothing.
//
// A bounded run for CI (POWER_LOSS_STATES states per scenario); the long run is
// `bash bench/power-loss.sh` (README "Durability"). A failure names each bad state's seed and the
// command that replays it from the recording, which is kept.
//
// Needs root and /dev/fuse, as test/fault/fuse-recorder.test.ts: skipped without them, unless
// TESSERA_REQUIRE_FUSE=1, when it fails.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';
import { CrashStateBuilder, writeCrashState } from '../crash/crash-states.js';
import { fuseUnavailable, startRecorder } from '../crash/fuse-recorder.js';
import { readOpLog } from '../crash/op-log.js';
import { type Durability, describeReport, runScenario, type Scenario } from '../crash/power-loss.js';

/** Crash states per scenario in CI; each costs a node start and a read of every key. */
const POWER_LOSS_STATES = Number(process.env.TESSERA_POWER_LOSS_STATES ?? 24);
/** The workload: enough keys and writes that every store's tree has branch pages, and many commits. */
const KEYS = 2000;
const WRITES = 12000;
const HINT = 'needs root and /dev/fuse to mount the crash recorder (mount -t fuse)';

const unavailable = fuseUnavailable();
if (unavailable !== undefined && process.env.TESSERA_REQUIRE_FUSE === '1')
  throw new Error(`the power-loss test ${HINT}: ${unavailable}`);
const skip = unavailable === undefined ? false : `${HINT}: ${unavailable}`;

test('the simulator finds the damage a power loss does to LMDB with a write map', {
  skip,
  timeout: 600_000,
}, async () => {
  const report = await runScenario({
    subject: 'raw-lmdb-writemap',
    store: 'lmdb',
    durability: 'stable',
    seed: 1,
    keys: KEYS,
    writes: WRITES * 2,
    states: POWER_LOSS_STATES,
  });
  console.log(describeReport(report));
  const damaged = report.outcomes.filter((o) => o.verdict !== 'sound');
  assert.ok(damaged.length > 0, 'some crash state of the write-map mode is damaged or lost synced writes');
  // Those states were the ones with unsynced pages kept: nothing synced is lost when none is.
  assert.ok(
    damaged.every((o) => o.choice.kind !== 'none'),
    'a state keeping nothing unsynced is sound',
  );
});

for (const store of ['lmdb', 'level'] as const) {
  for (const durability of ['memory', 'store', 'stable'] as Durability[]) {
    test(`${store} at ${durability}: every crash state opens and keeps what was acknowledged stable`, {
      skip,
      timeout: 600_000,
    }, async () => {
      const scenario: Scenario = {
        subject: 'node',
        store,
        durability,
        seed: 7,
        keys: KEYS,
        writes: WRITES,
        states: POWER_LOSS_STATES,
      };
      const report = await runScenario(scenario);
      console.log(describeReport(report));
      assert.ok(report.acked > 0, 'the writer had writes acknowledged before the power loss');
      if (durability === 'stable') assert.equal(report.stableAcked, report.acked);
      assert.deepEqual(
        report.outcomes.filter((o) => o.verdict !== 'sound').map((o) => `${o.stateSeed}: ${o.verdict}`),
        [],
      );
    });
  }
}

// The first start is the riskiest moment: every file is new. The LevelDB classic-level bundles does
// not sync a new database's first MANIFEST before CURRENT names it, and the simulator found the
// state that leaves: a store that cannot open (level-store.ts makes a new database aside now).
// Every crash point of a store's creation, with nothing unsynced kept and with everything kept.
for (const kind of ['lmdb', 'level'] as const) {
  test(`${kind}: a power loss at any point of a new store's creation leaves one that opens`, {
    skip,
    timeout: 300_000,
  }, async () => {
    // As after a reboot: lmdb-js opens each env at its newest flushed state (state-checker.ts).
    process.env.LMDB_RESTORE = 'safe';
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-power-loss-create-'));
    try {
      const mount = path.join(root, 'mount');
      fs.mkdirSync(path.join(root, 'backing'));
      fs.mkdirSync(mount);
      const recorder = await startRecorder({
        backing: path.join(root, 'backing'),
        mount,
        log: path.join(root, 'ops.log'),
      });
      try {
        // As a node starts: its recovery first (which creates a new store), then the store.
        const location = locationOf(kind, path.join(mount, 'data'));
        await recoverStore(location);
        const store = await openStore(location);
        for (let f = 0; f < 4; f++) await store.openFragment(f);
        await store.close();
      } finally {
        await recorder.stop();
      }
      const ops = readOpLog(fs.readFileSync(path.join(root, 'ops.log')));
      assert.ok(ops.length > 5, `the creation was recorded (${ops.length} ops)`);
      const builder = new CrashStateBuilder(ops);
      for (let k = 0; k <= ops.length; k++) {
        for (const choice of [{ kind: 'none' }, { kind: 'all' }] as const) {
          const stateDir = path.join(root, `state-${k}-${choice.kind}`);
          writeCrashState(builder.at(k, choice), stateDir);
          const location = locationOf(kind, path.join(stateDir, 'data'));
          fs.mkdirSync(location.dataDir, { recursive: true });
          await recoverStore(location);
          const store = await openStore(location).catch((err: Error) => {
            throw new Error(`crash before op ${k} (${choice.kind}): ${err.message}`);
          });
          for (let f = 0; f < 4; f++) await store.openFragment(f);
          await store.close();
          fs.rmSync(stateDir, { recursive: true, force: true });
        }
      }
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
}

function locationOf(kind: 'lmdb' | 'level', dataDir: string): StoreLocation {
  return {
    kind,
    dataDir,
    fragmentCount: 4,
    groups: [0, 1],
    groupCount: 2,
  };
}
