// The membership simulator (membership-sim.ts) over a few seeds: through
// partitions, loss, kills, restarts, pauses and skewed clocks no member is declared Down while a
// majority reaches it; a killed member is unreachable everywhere within seconds and Down after
// downAfterMs; a pause shorter than downAfterMs never makes a member Down; no table epoch has two
// coordinators and only a node reaching a majority changes the table; and after the faults heal
// every node's view and table converge. A failure names its seed; `TESSERA_SIM_SEED=<seed>` replays
// that one alone, `TESSERA_SIM_SEEDS=<n>` runs n seeds.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MEMBERSHIP_SIM_DEFAULTS, MembershipSim, type MembershipSimReport } from './membership-sim.js';
import { simSeeds } from './sim-seeds.js';

/** Seeds per run: each simulates about six minutes of a cluster in about 0.1 s, so CI stays quick. */
const SEEDS_DEFAULT = 16;

test('membership and the coordinator stay safe through faults, detect a kill, forgive a pause, and converge', (t) => {
  const reports: MembershipSimReport[] = [];
  for (const seed of simSeeds(SEEDS_DEFAULT)) {
    try {
      reports.push(new MembershipSim({ ...MEMBERSHIP_SIM_DEFAULTS, seed }).run());
    } catch (error) {
      throw new Error(
        `membership sim failed with seed ${seed} (replay: TESSERA_SIM_SEED=${seed}): ${(error as Error).message}`,
      );
    }
  }
  t.diagnostic(JSON.stringify(reports));
  // The faults happened: otherwise the run proves nothing.
  const sum = (key: keyof MembershipSimReport) => reports.reduce((total, r) => total + r[key], 0);
  assert.ok(sum('partitions') > 0 && sum('kills') > 0 && sum('pauses') > 0, 'partitions, kills and pauses');
  assert.ok(sum('lost') > 0, 'messages were lost');
  assert.ok(sum('unreachableMarks') > 0 && sum('downs') > 0, 'members were marked unreachable and Down');
  assert.ok(sum('takeovers') > reports.length, 'coordinators took over after the bootstrap');
});
