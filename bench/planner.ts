// The coordinator's planner at scale (not a test: run it by hand, read the figures). The coordinator
// plans on the main thread at every plan interval while moves wait, so its cost is main-thread time
// taken from membership and clients.
//
//   npm run build:test && node .build/bench/planner.js [--fragments 1024,16384] [--members 5,64,100,300,1000]
//       [--replicas 3] [--core DIR] [--case-timeout 120] [--sequences 300] [--seed 1]
//
// Each (fragments, members) case runs in a fresh process (no weights kept from another case):
//   cold       the first table over the members (bootstrapChanges): every (member, fragment) weighed
//   after down the first plan with the last member Down (its replicas replaced)
//   steady     a plan over the same members again (mean of 5): what every plan interval costs
//   after join the first plan with one more member Up than the table holds
//   join/opt   replicas the join's desired placement adds, against the optimum R·F/(N+1) (– below
//              one replica: more members than replicas, a joiner need not take any)
// Times are how long each call holds the main thread, in ms (run it on an idle machine); heap is
// used heap after the case.
//
// Then --sequences seeded runs of membership changes (--seed): each a cluster of 3–8 members,
// 8–127 fragments and R of 1–3, then five changes (a join, a leave or a member Down), each planned
// and carried out round by round until the plan is empty. Printed: replica moves against the
// optimum (a join: an even share ⌊F·R/N⌋ onto the joiner; a leave or Down: the member's replicas),
// replicas moved more than once within one change, the spread of replicas per member (max − min,
// mean over changes) and the replicas the least-serving member serves (first in a list) against
// an even share F/N (mean over changes with F/N ≥ 8), once the serving transfers the coordinator
// makes when the table settles are carried out too (their count a change is printed).
// --core DIR imports coordinator.js and assignment-table.js from DIR (another build's compiled
// src/core), to set this build beside another in one run. A case past --case-timeout seconds is
// stopped and reported so.

import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX } from '../src/core/limits.js';
import { Random } from './load/random.js';

interface CaseFigures {
  fragments: number;
  members: number;
  coldMs: number;
  afterDownMs: number;
  steadyMs: number;
  afterJoinMs: number;
  joinAdded: number;
  joinOptimum: number;
  heapMiB: number;
}

type Coordinator = typeof import('../src/core/coordinator.js');
type Tables = typeof import('../src/core/assignment-table.js');

/**
 * How long `fn` holds the main thread (its event loop waits that long), and its result. Not
 * process.cpuUsage: that counts the collector's and the compiler's helper threads too, which do
 * not hold the event loop (up to twice the main thread's time here).
 */
function blockedMs<T>(fn: () => T): [number, T] {
  const start = performance.now();
  const result = fn();
  return [performance.now() - start, result];
}

async function runCase(
  coreDir: string,
  fragments: number,
  members: number,
  replicas: number,
): Promise<CaseFigures> {
  const core = (await import(pathToFileURL(`${coreDir}/coordinator.js`).href)) as Coordinator;
  const tables = (await import(pathToFileURL(`${coreDir}/assignment-table.js`).href)) as Tables;
  const ids = Array.from({ length: members + 1 }, (_, i) => `node-${String(i).padStart(4, '0')}`);
  const up = (id: string) => ({ id, state: 'Up' as const, reachable: true, incarnation: 0 });
  const view = ids.slice(0, members).map(up);
  const coordinator = { id: ids[0], incarnation: 0 };
  const fence = { coordinatorId: ids[0], incarnation: 0, epoch: 1 };
  const table = new tables.AssignmentTable(fragments);
  const [coldMs, changes] = blockedMs(() => core.bootstrapChanges(fragments, view, replicas, fence, 0));
  for (const change of changes) table.apply(change, coordinator);
  const down = view.map((m, i) =>
    i === members - 1 ? { ...m, state: 'Down' as const, reachable: false } : m,
  );
  const [afterDownMs] = blockedMs(() => core.planMoves(table, down, replicas));
  let steadyMs = 0;
  for (let i = 0; i < 5; i++) steadyMs += blockedMs(() => core.planMoves(table, down, replicas))[0] / 5;
  const joined = [...view, up(ids[members])];
  const [afterJoinMs, plan] = blockedMs(() => core.planMoves(table, joined, replicas));
  let joinAdded = 0;
  for (const [fragment, wanted] of plan.desired) {
    const current = table.active(fragment)?.replicas ?? [];
    joinAdded += wanted.filter((id) => !current.includes(id)).length;
  }
  return {
    fragments,
    members,
    coldMs,
    afterDownMs,
    steadyMs,
    afterJoinMs,
    joinAdded,
    joinOptimum: (replicas * fragments) / (members + 1),
    heapMiB: process.memoryUsage().heapUsed / 2 ** 20,
  };
}

interface SequenceFigures {
  moves: number;
  optimum: number;
  movedTwice: number;
  spread: number;
  leastServing: number;
  /** Serving transfers a change, once its moves are done. */
  transfers: number;
}

/** Seeded runs of joins, leaves and Downs, each carried out round by round until the plan is empty. */
async function runSequences(coreDir: string, sequences: number, seed: number): Promise<SequenceFigures> {
  const core = (await import(pathToFileURL(`${coreDir}/coordinator.js`).href)) as Coordinator;
  const tables = (await import(pathToFileURL(`${coreDir}/assignment-table.js`).href)) as Tables;
  const random = new Random(seed);
  const member = (id: string, state: 'Up' | 'Leaving' | 'Down' = 'Up') => ({
    id,
    state,
    reachable: state !== 'Down',
    incarnation: 0,
  });
  const fence = { coordinatorId: 'n0', incarnation: 0, epoch: 1 };
  const self = { id: 'n0', incarnation: 0 };
  let moves = 0;
  let optimum = 0;
  let movedTwice = 0;
  let spread = 0;
  let changes = 0;
  let leastServing = 0;
  let servingChanges = 0;
  let transfers = 0;
  for (let run = 0; run < sequences; run++) {
    let ids = Array.from({ length: 3 + random.int(6) }, (_, i) => `n${i}`);
    let next = ids.length;
    const replicas = 1 + random.int(3);
    const fragments = 8 + random.int(120);
    const table = new tables.AssignmentTable(fragments);
    for (const change of core.bootstrapChanges(
      fragments,
      ids.map((id) => member(id)),
      replicas,
      fence,
      0,
    ))
      table.apply(change, self);
    for (let step = 0; step < 5; step++) {
      const kind = random.int(3);
      const others = ids.filter((id) => id !== 'n0');
      const view = ids.map((id) => member(id));
      if (kind === 0 || others.length <= replicas) {
        ids = [...ids, `n${next++}`];
        view.push(member(ids[ids.length - 1]));
        optimum += Math.floor((fragments * Math.min(replicas, ids.length)) / ids.length);
      } else {
        const gone = others[random.int(others.length)];
        optimum += [...table.entries()].filter(
          ([, e]) => e.kind === 'active' && e.replicas.includes(gone),
        ).length;
        view[ids.indexOf(gone)] = member(gone, kind === 1 ? 'Leaving' : 'Down');
        ids = ids.filter((id) => id !== gone);
      }
      const placed = new Set<string>();
      for (let round = 0; round < 10_000; round++) {
        const plan = core.planMoves(table, view, replicas);
        if (plan.moves.length === 0) break;
        for (const move of plan.moves) {
          if (placed.has(`${move.fragment}:${move.source}`)) movedTwice++;
          placed.add(`${move.fragment}:${move.target}`);
          table.apply(core.startMove(table.active(move.fragment)!, move, fence, round), self);
          table.apply(core.finishMove(move.fragment, table.active(move.fragment)!, fence, round), self);
          moves++;
        }
      }
      // As the coordinator once the table settles (a build before had no serving transfers).
      for (let round = 0; core.servingTransfers !== undefined && round < 10_000; round++) {
        const batch = core.servingTransfers(table, view, PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX);
        if (batch.length === 0) break;
        for (const { fragment, to } of batch)
          table.apply(core.transferServing(fragment, table.active(fragment)!, to, fence, round), self);
        transfers += batch.length;
      }
      const held = new Map(ids.map((id) => [id, 0]));
      const first = new Map(ids.map((id) => [id, 0]));
      for (const [, entry] of table.entries()) {
        if (entry.kind !== 'active') continue;
        for (const id of entry.replicas) held.set(id, (held.get(id) ?? 0) + 1);
        first.set(entry.replicas[0], (first.get(entry.replicas[0]) ?? 0) + 1);
      }
      spread += Math.max(...held.values()) - Math.min(...held.values());
      changes++;
      const even = fragments / ids.length;
      if (even >= 8) {
        leastServing += Math.min(...first.values()) / even;
        servingChanges++;
      }
    }
  }
  return {
    moves,
    optimum,
    movedTwice,
    spread: spread / changes,
    leastServing: leastServing / servingChanges,
    transfers: transfers / changes,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      fragments: { type: 'string', default: '1024,16384' },
      members: { type: 'string', default: '5,64,100,300,1000' },
      replicas: { type: 'string', default: '3' },
      core: { type: 'string', default: fileURLToPath(new URL('../src/core', import.meta.url)) },
      'case-timeout': { type: 'string', default: '120' },
      case: { type: 'string' },
      sequences: { type: 'string', default: '300' },
      seed: { type: 'string', default: '1' },
    },
  });
  const replicas = Number(values.replicas);
  if (values.case !== undefined) {
    const [fragments, members] = values.case.split(',').map(Number);
    const figures = await runCase(values.core as string, fragments, members, replicas);
    process.stdout.write(`${JSON.stringify(figures)}\n`);
    return;
  }
  const fmt = (ms: number): string => (ms >= 100 ? ms.toFixed(0) : ms.toFixed(1));
  console.log(`core: ${values.core}, replicas ${replicas}`);
  console.log(
    '| fragments | members | cold ms | after down ms | steady ms | after join ms | join/opt | heap MiB |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const fragments of (values.fragments as string).split(',').map(Number)) {
    for (const members of (values.members as string).split(',').map(Number)) {
      const run = spawnSync(
        process.execPath,
        [
          fileURLToPath(import.meta.url),
          '--case',
          `${fragments},${members}`,
          '--core',
          values.core as string,
          '--replicas',
          String(replicas),
        ],
        { encoding: 'utf8', maxBuffer: 1 << 20, timeout: Number(values['case-timeout']) * 1000 },
      );
      if (run.signal !== null) {
        console.log(`| ${fragments} | ${members} | over ${values['case-timeout']} s |`);
        continue;
      }
      if (run.status !== 0) {
        console.log(`| ${fragments} | ${members} | failed: ${run.stderr.trim().split('\n').at(-1)} |`);
        continue;
      }
      const f = JSON.parse(run.stdout) as CaseFigures;
      console.log(
        `| ${f.fragments} | ${f.members} | ${fmt(f.coldMs)} | ${fmt(f.afterDownMs)} | ${fmt(f.steadyMs)} | ${fmt(f.afterJoinMs)} | ${f.joinOptimum < 1 ? '–' : (f.joinAdded / f.joinOptimum).toFixed(2)} | ${f.heapMiB.toFixed(0)} |`,
      );
    }
  }
  const sequences = Number(values.sequences);
  if (sequences > 0) {
    const q = await runSequences(values.core as string, sequences, Number(values.seed));
    console.log(
      `\n${sequences} sequences of 5 changes (seed ${values.seed}): ${q.moves} replica moves, ${(q.moves / q.optimum).toFixed(3)}× the optimum; ` +
        `${q.movedTwice} moved twice; spread ${q.spread.toFixed(2)} replicas; least-serving member ${q.leastServing.toFixed(2)} of an even share; ${q.transfers.toFixed(1)} serving transfers a change`,
    );
  }
}

await main();
