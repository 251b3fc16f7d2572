// The coordinator's planner at scale (not a test: run it by hand, read the figures). The coordinator
// plans on the main thread at every plan interval while moves wait, so its cost is main-thread time
// taken from membership and clients.
//
//   npm run build:test && node .build/bench/planner.js [--fragments 1024,16384] [--members 5,64,100,300,1000]
//       [--replicas 3] [--core DIR] [--case-timeout 120]
//
// Each (fragments, members) case runs in a fresh process (no weights kept from another case):
//   cold       the first table over the members (bootstrapChanges): every (member, fragment) weighed
//   after down the first plan with the last member Down (its replicas replaced)
//   steady     a plan over the same members again (mean of 5): what every plan interval costs
//   after join the first plan with one more member Up than the table holds
//   join/opt   replicas the join's desired placement adds, against the optimum R·F/(N+1)
// Times are the main thread's CPU (process.cpuUsage) in ms; heap is used heap after the case.
// --core DIR imports coordinator.js and assignment-table.js from DIR (another build's compiled
// src/core), to set this build beside another in one run. A case past --case-timeout seconds is
// stopped and reported so.

import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

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

function cpuMs<T>(fn: () => T): [number, T] {
  const start = process.cpuUsage();
  const result = fn();
  const used = process.cpuUsage(start);
  return [(used.user + used.system) / 1000, result];
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
  const [coldMs, changes] = cpuMs(() => core.bootstrapChanges(fragments, view, replicas, fence, 0));
  for (const change of changes) table.apply(change, coordinator);
  const down = view.map((m, i) =>
    i === members - 1 ? { ...m, state: 'Down' as const, reachable: false } : m,
  );
  const [afterDownMs] = cpuMs(() => core.planMoves(table, down, replicas));
  let steadyMs = 0;
  for (let i = 0; i < 5; i++) steadyMs += cpuMs(() => core.planMoves(table, down, replicas))[0] / 5;
  const joined = [...view, up(ids[members])];
  const [afterJoinMs, plan] = cpuMs(() => core.planMoves(table, joined, replicas));
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

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      fragments: { type: 'string', default: '1024,16384' },
      members: { type: 'string', default: '5,64,100,300,1000' },
      replicas: { type: 'string', default: '3' },
      core: { type: 'string', default: fileURLToPath(new URL('../src/core', import.meta.url)) },
      'case-timeout': { type: 'string', default: '120' },
      case: { type: 'string' },
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
        `| ${f.fragments} | ${f.members} | ${fmt(f.coldMs)} | ${fmt(f.afterDownMs)} | ${fmt(f.steadyMs)} | ${fmt(f.afterJoinMs)} | ${(f.joinAdded / f.joinOptimum).toFixed(2)} | ${f.heapMiB.toFixed(0)} |`,
      );
    }
  }
}

await main();
