// `npm run bench:check`: runs the tinybench suites and compares each row's ops/s with the stored
// baseline (bench/baseline.json), naming rows that fell more than 20 % behind the run's median
// change (how much faster or slower the machine itself is today). A report, not a gate: these
// machines are small and noisy, so it always exits 0 unless the run itself fails.
//
//   node .build/bench/check.js [--update] [--only SUITE,…]
//     --update   write the new figures as the baseline instead of comparing

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRow } from './common.js';

/** A row that lost more than this fraction of its baseline ops/s is named as a regression. */
const REGRESSION_FRACTION = 0.2;
const BASELINE = fileURLToPath(new URL('../../bench/baseline.json', import.meta.url));
const RUNNER = fileURLToPath(new URL('./run.js', import.meta.url));

const args = process.argv.slice(2);
const update = args.includes('--update');
const onlyAt = args.indexOf('--only');
const dir = mkdtempSync(join(tmpdir(), 'tessera-bench-check-'));
const out = join(dir, 'rows.json');
try {
  const runArgs = [RUNNER, '--json', out, ...(onlyAt === -1 ? [] : ['--only', args[onlyAt + 1]])];
  const run = spawnSync(process.execPath, runArgs, { stdio: ['ignore', 'inherit', 'inherit'] });
  if (run.status !== 0) process.exit(run.status ?? 1);
  const rows = JSON.parse(readFileSync(out, 'utf8')) as BenchRow[];
  if (update) {
    writeFileSync(BASELINE, `${JSON.stringify(rows, null, 2)}\n`);
    console.log(`baseline updated: ${rows.length} rows in bench/baseline.json`);
  } else {
    compare(rows);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

function compare(rows: BenchRow[]): void {
  let baseline: BenchRow[];
  try {
    baseline = JSON.parse(readFileSync(BASELINE, 'utf8')) as BenchRow[];
  } catch {
    console.log('no bench/baseline.json yet: run with --update to record one');
    return;
  }
  const known = new Map(baseline.map((r) => [`${r.suite}/${r.name}`, r.opsPerSec]));
  const paired = rows.flatMap((r) => {
    const before = known.get(`${r.suite}/${r.name}`);
    return before === undefined ? [] : [{ row: r, before, ratio: r.opsPerSec / before }];
  });
  if (paired.length === 0) {
    console.log('bench check: no row in common with bench/baseline.json');
    return;
  }
  // The machine itself runs faster or slower from one run to the next (shared, 2 cores): every row
  // moves with it. The median ratio measures that; a row is named when it fell behind the median.
  const ratios = paired.map((p) => p.ratio).sort((a, b) => a - b);
  const machine = ratios[Math.floor(ratios.length / 2)];
  const regressions = paired
    .filter((p) => p.ratio / machine - 1 < -REGRESSION_FRACTION)
    .map(
      (p) =>
        `${p.row.suite} / ${p.row.name}: ${Math.round(p.before)} → ${Math.round(p.row.opsPerSec)} ops/s ` +
        `(${((p.ratio / machine - 1) * 100).toFixed(0)} % against the run's median)`,
    );
  console.log(`bench check: this run's median speed is ${(machine * 100).toFixed(0)} % of the baseline's`);
  if (regressions.length === 0) {
    console.log(`bench check: no row fell more than ${REGRESSION_FRACTION * 100} % behind the median`);
  } else {
    console.log(
      `bench check: ${regressions.length} possible regressions (noisy machine: rerun before trusting)`,
    );
    for (const line of regressions) console.log(line);
  }
}
