// Two builds' worker paths (worker-path.ts) side by side in one worker thread, their turns
// alternating (ABBA…), so both see the same machine at the same moment: on a machine whose runs drift
// by ±20 %, the ratio of two builds measured this way holds to a few per cent.
//
//   node .build/bench/worker-path-ab.js ROOT_A ROOT_B [seconds] [batch]
//
// A ROOT is the compiled tree of a checkout (its `.build`, from `npm run build:test`). Prints the
// median and mean ns per write of each (the mean includes garbage collection) and B's ratio to A.

import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { WORKER_YOUNG_GENERATION_MB } from '../src/core/limits.js';
import { isMain } from './common.js';
import { openWorkerPath } from './worker-path.js';

/** Turns each build runs before measuring (compilation, store growth). */
const WARMUP_TURNS = 200;

interface AbArgs {
  roots: [string, string];
  seconds: number;
  batch: number;
}

async function compare({ roots, seconds, batch }: AbArgs): Promise<string> {
  const a = await openWorkerPath(roots[0], batch);
  const b = await openWorkerPath(roots[1], batch);
  try {
    for (let i = 0; i < WARMUP_TURNS; i++) {
      await a.turn();
      await b.turn();
    }
    const ns: [number[], number[]] = [[], []];
    const end = Date.now() + seconds * 1000;
    for (let flip = false; Date.now() < end; flip = !flip) {
      const [first, second] = flip ? [1, 0] : [0, 1];
      ns[first].push(await (first === 0 ? a : b).turn());
      ns[second].push(await (second === 0 ? a : b).turn());
    }
    const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1] / batch;
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length / batch;
    const [ma, mb] = [med(ns[0]), med(ns[1])];
    const [ea, eb] = [mean(ns[0]), mean(ns[1])];
    return [
      `turns: ${ns[0].length} each, ${batch} writes per turn`,
      `A ns/write: median ${ma.toFixed(0)}, mean ${ea.toFixed(0)}   (${roots[0]})`,
      `B ns/write: median ${mb.toFixed(0)}, mean ${eb.toFixed(0)}   (${roots[1]})`,
      `B/A: median ${(mb / ma).toFixed(3)}, mean ${(eb / ea).toFixed(3)}`,
    ].join('\n');
  } finally {
    await a.close();
    await b.close();
  }
}

if (!isMainThread) parentPort!.postMessage(await compare(workerData as AbArgs));
else if (isMain(import.meta.url)) {
  const [rootA, rootB, seconds = '10', batch = '2000'] = process.argv.slice(2);
  if (rootA === undefined || rootB === undefined) {
    console.error('usage: node .build/bench/worker-path-ab.js ROOT_A ROOT_B [seconds] [batch]');
    process.exit(2);
  }
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { roots: [rootA, rootB], seconds: Number(seconds), batch: Number(batch) } satisfies AbArgs,
    resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
  });
  worker.once('message', (report: string) => console.log(report));
  worker.once('error', (err) => {
    console.error(err);
    process.exitCode = 1;
  });
}
