// The placement simulator (placement-sim.ts) over a few seeds: while clients write, fragments move
// (joins, leaves, Down members, rebalancing, pins) and serving is evened out, through partitions,
// kills, restarts (some on a lost store, rejoining under their id), pauses and skewed clocks, with
// the real placement driver on every node. No
// acknowledged write is lost, no copy is dropped before its handoff, a leaving node exits only once
// it holds nothing, no fragment goes without a serving replica past the grace while one could serve
// it, and once the faults stop every fragment settles at R replicas with no move left, without the
// members that left. A failure names its seed; `TESSERA_SIM_SEED=<seed>` replays that one alone,
// `TESSERA_SIM_SEEDS=<n>` runs n seeds, `TESSERA_SIM_TRACE=1` prints what happened.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PLACEMENT_SIM_DEFAULTS, PlacementSim, type PlacementSimReport } from './placement-sim.js';
import { simSeeds } from './sim-seeds.js';

/** Seeds per run: each simulates about four minutes of a cluster in about a second. */
const SEEDS_DEFAULT = 16;

test('fragments move under a write load through faults without losing an acknowledged write, and settle', async (t) => {
  const reports: PlacementSimReport[] = [];
  for (const seed of simSeeds(SEEDS_DEFAULT)) {
    try {
      reports.push(await new PlacementSim({ ...PLACEMENT_SIM_DEFAULTS, seed }).runMoves());
    } catch (error) {
      throw new Error(
        `placement sim failed with seed ${seed} (replay: TESSERA_SIM_SEED=${seed}): ${(error as Error).message}`,
      );
    }
  }
  t.diagnostic(JSON.stringify(reports));
  // The faults and the moves happened: otherwise the run proves nothing.
  const sum = (key: keyof PlacementSimReport) => reports.reduce((total, r) => total + r[key], 0);
  assert.ok(sum('kills') > 0 && sum('partitions') > 0, 'kills and partitions');
  // Killed nodes came back on lost stores; the coordinator dropped the copies the table still listed.
  assert.ok(sum('wipes') > 0 && sum('lostCopiesDropped') > 0, 'restarts on lost stores, lost copies dropped');
  assert.ok(sum('wipesAmongPeers') > 0, 'restarts on lost stores under the member list');
  assert.ok(sum('departures') > 0, 'members left');
  assert.ok(
    sum('writesAcked') > 0 && sum('movesFinished') > 0 && sum('drops') > 0,
    'writes, finished moves, drops',
  );
  assert.ok(sum('repaired') > 0, 'anti-entropy repaired what replication did not deliver');
  // Writes went through nodes that do not serve their fragment, and some waited for a table or a
  // copy that lagged (in a calm cluster none may be refused: the simulator checks each).
  assert.ok(
    sum('forwarded') > 0 && sum('forwardWaits') > 0,
    'forwarded writes, and waits for a lagging node',
  );
  // Serving moved to a copy verified against the replica that handed it over, without a round:
  // gained copies, and those of successors that verified theirs while the move ran.
  assert.ok(sum('handoversCovered') > 0, 'handovers that completed a verified copy');
  assert.ok(sum('successionRounds') > 0, 'successors verified their copies before the handover');
  // A catch-up from a replica whose handoff pulled its copy here whole ended with that pull.
  assert.ok(sum('catchUpsAbsorbed') > 0, 'catch-ups completed by the handoff’s whole pull');
  // A handoff's target verified against the copy under the continuity still held took only the
  // writes queued for it — a gained copy, or one anti-entropy verified; the others pulled the copy
  // whole.
  assert.ok(sum('routineVerifications') > 0, 'anti-entropy verified copies');
  assert.ok(sum('handoffsVerified') > 0 && sum('drains') > 0, 'handoffs to verified copies, and whole pulls');
  // Operators pinned fragments, and the coordinator evened out who serves once the table settled.
  assert.ok(sum('pins') > 0 && sum('servingTransfers') > 0, 'pins, and serving transfers');
  assert.ok(sum('transferRounds') > 0, 'members verified their copies before serving was handed to them');
});
