// `npm run bench`: every tinybench suite in one run, printed as one table of ops/s with each row's
// ratio to its baseline from the same run. `--json FILE` also writes the rows.
//
//   TESSERA_BENCH_MS   time per task in ms (default 1000)
//   --only SUITE[,…]   run only these suites (ring, codec, keyspace, resp, lww, store, worker-path,
//                      embedded)

import { writeFileSync } from 'node:fs';
import { codecBench } from './codec.bench.js';
import { BENCH_TIME_MS, type BenchRow, formatTable } from './common.js';
import { embeddedBench } from './embedded.bench.js';
import { keyspaceBench } from './keyspace.bench.js';
import { lwwBench } from './lww.bench.js';
import { respBench } from './resp.bench.js';
import { runRingBench } from './ring.bench.js';
import { storeBench } from './store.bench.js';
import { workerPathBenchInWorker } from './worker-path.bench.js';

async function ringRows(): Promise<BenchRow[]> {
  const rows = await runRingBench(BENCH_TIME_MS);
  return rows.map((r) => {
    const [transport, rest] = [r.name.slice(0, r.name.indexOf(' ')), r.name.slice(r.name.indexOf(' ') + 1)];
    return {
      suite: 'ring (records/s)',
      name: r.name,
      opsPerSec: r.recordsPerSec,
      baseline: transport === 'ring' ? `message-per-record ${rest}` : undefined,
    };
  });
}

const SUITES: Record<string, () => Promise<BenchRow[]>> = {
  ring: ringRows,
  codec: codecBench,
  keyspace: keyspaceBench,
  resp: respBench,
  lww: lwwBench,
  store: storeBench,
  'worker-path': () => workerPathBenchInWorker(),
  embedded: () => embeddedBench(1),
};

const args = process.argv.slice(2);
const onlyAt = args.indexOf('--only');
const only = onlyAt === -1 ? Object.keys(SUITES) : args[onlyAt + 1].split(',');
const jsonAt = args.indexOf('--json');
const rows: BenchRow[] = [];
for (const name of only) {
  const suite = SUITES[name];
  if (suite === undefined) throw new Error(`unknown suite ${name}; known: ${Object.keys(SUITES).join(', ')}`);
  process.stderr.write(`running ${name}…\n`);
  rows.push(...(await suite()));
}
console.log(formatTable(rows));
if (jsonAt !== -1) writeFileSync(args[jsonAt + 1], `${JSON.stringify(rows, null, 2)}\n`);
