// Shared bench plumbing: run tinybench tasks, report operations per second, print one table.
// Figures are only compared within one run (ours vs a baseline on the same machine, same moment).

import { Bench } from 'tinybench';

export interface BenchRow {
  suite: string;
  name: string;
  /** Operations per second (an iteration may cover many operations). */
  opsPerSec: number;
  /** Name of the row this one is compared against, if any. */
  baseline?: string;
}

export interface BenchTask {
  name: string;
  /** Operations one call of `fn` performs. */
  opsPerCall: number;
  fn: () => unknown;
  baseline?: string;
}

/** Milliseconds each task runs (after warm-up); override with TESSERA_BENCH_MS. */
export const BENCH_TIME_MS = Number(process.env.TESSERA_BENCH_MS ?? 1000);

export async function runTasks(suite: string, tasks: BenchTask[]): Promise<BenchRow[]> {
  const bench = new Bench({ time: BENCH_TIME_MS, warmupTime: Math.min(300, BENCH_TIME_MS / 2) });
  for (const t of tasks) bench.add(t.name, t.fn);
  await bench.run();
  return tasks.map((t, i) => {
    const result = bench.tasks[i].result;
    if (result.state !== 'completed') throw new Error(`${suite}/${t.name}: ${result.state}`);
    return { suite, name: t.name, opsPerSec: (1000 / result.period) * t.opsPerCall, baseline: t.baseline };
  });
}

/** One table: suite, task, ops/s, and the ratio to the baseline row of the same suite. */
export function formatTable(rows: BenchRow[]): string {
  const lines = ['| suite | task | ops/s | vs baseline |', '|---|---|---:|---|'];
  for (const r of rows) {
    const base =
      r.baseline === undefined ? undefined : rows.find((b) => b.suite === r.suite && b.name === r.baseline);
    const ratio = base === undefined ? '' : `${(r.opsPerSec / base.opsPerSec).toFixed(2)}× ${base.name}`;
    lines.push(`| ${r.suite} | ${r.name} | ${Math.round(r.opsPerSec).toLocaleString('en-US')} | ${ratio} |`);
  }
  return lines.join('\n');
}

/** True when this module is the process entry point (`node file.js`). */
export function isMain(url: string): boolean {
  return process.argv[1] !== undefined && url === new URL(`file://${process.argv[1]}`).href;
}
