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
  /** Untimed, before a task's calls of a round (and of its warm-up) start. */
  beforeAll?: () => Promise<void> | void;
  /** Untimed, after a task's last call of a round (and of its warm-up). */
  afterAll?: () => Promise<void> | void;
}

/** Milliseconds each task runs (after warm-up); override with TESSERA_BENCH_MS. */
export const BENCH_TIME_MS = Number(process.env.TESSERA_BENCH_MS ?? 1000);
/** Shortest round of an interleaved run (`rounds`), so a round still covers several calls. */
const ROUND_TIME_MS_MIN = 100;
/** Calls a task makes in a round at the least, however long they take. */
const ROUND_ITERATIONS_MIN = 4;

/**
 * Runs the tasks and reports each one's ops/s. With `rounds` > 1 the tasks take turns, round after
 * round, each for its share of BENCH_TIME_MS, and a task's figure is its median round: a drift of
 * the machine, or the after-effects of one task (a store's file growing, pages the kernel is still
 * writing back), then falls on every task of the run alike instead of on whichever ran last.
 */
export async function runTasks(suite: string, tasks: BenchTask[], rounds = 1): Promise<BenchRow[]> {
  const perRound: number[][] = tasks.map(() => []);
  const roundMs = rounds === 1 ? BENCH_TIME_MS : Math.max(ROUND_TIME_MS_MIN, BENCH_TIME_MS / rounds);
  for (let round = 0; round < rounds; round++) {
    const bench =
      rounds === 1
        ? new Bench({ time: roundMs, warmupTime: Math.min(300, roundMs / 2) })
        : new Bench({
            time: roundMs,
            iterations: ROUND_ITERATIONS_MIN,
            warmupTime: Math.min(100, roundMs / 2),
            warmupIterations: 1,
          });
    for (const t of tasks) bench.add(t.name, t.fn, { beforeAll: t.beforeAll, afterAll: t.afterAll });
    await bench.run();
    tasks.forEach((t, i) => {
      const result = bench.tasks[i].result;
      if (result.state !== 'completed') throw new Error(`${suite}/${t.name}: ${result.state}`);
      perRound[i].push((1000 / result.period) * t.opsPerCall);
    });
  }
  return tasks.map((t, i) => ({ suite, name: t.name, opsPerSec: median(perRound[i]), baseline: t.baseline }));
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
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
