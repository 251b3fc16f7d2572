// Two builds' embedded put side by side in one process: each build starts its own node (lmdb, one
// worker, 16 fragments, 100 000 keys preloaded) and the two take turns (ABBA…) putting in windowed
// batches as embedded.bench.ts does, a slice each, so both see the same machine at the same moment.
// On a machine whose speed drifts by ±20 % from minute to minute, the ratio holds to a few per cent
// (the same build against itself: 0.97–1.03).
//
//   node .build/bench/embedded-ab.js ROOT_A ROOT_B [seconds] [sliceMs]
//
// A ROOT is the compiled tree of a checkout (its `.build`, from `npm run build:test`). Prints each
// build's puts per second over all of its slices and B's ratio to A.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { isMain } from './common.js';
import { BATCH, BATCHES_PER_CALL, benchKeys, KEYS, VALUE, windowed } from './embedded.bench.js';

/** Slices each build runs before measuring (compilation, store growth). */
const WARMUP_SLICES = 4;

interface Side {
  root: string;
  node: { put(key: Buffer, value: Buffer): Promise<void>; close(): Promise<void> };
  dir: string;
  next: number;
  ops: number;
  ms: number;
}

const keys = benchKeys();

async function open(root: string): Promise<Side> {
  const { Tessera } = (await import(
    pathToFileURL(join(root, 'src', 'main', 'node.js')).href
  )) as typeof import('../src/main/node.js');
  const dir = mkdtempSync(join(tmpdir(), 'tessera-embedded-ab-'));
  const node = await Tessera.start({
    store: 'lmdb',
    dataDir: dir,
    workers: 1,
    fragments: 16,
    logger: pino({ level: 'silent' }),
  });
  for (let i = 0; i < KEYS; i += BATCH)
    await Promise.all(keys.slice(i, i + BATCH).map((k) => node.put(k, VALUE)));
  return { root, node, dir, next: 0, ops: 0, ms: 0 };
}

function putBatch(side: Side): Promise<unknown> {
  const puts: Promise<void>[] = [];
  for (let i = 0; i < BATCH; i++) puts.push(side.node.put(keys[side.next++ % KEYS], VALUE));
  return Promise.all(puts);
}

async function slice(side: Side, sliceMs: number): Promise<void> {
  const start = performance.now();
  let ops = 0;
  while (performance.now() - start < sliceMs) {
    await windowed(() => putBatch(side));
    ops += BATCH * BATCHES_PER_CALL;
  }
  side.ops += ops;
  side.ms += performance.now() - start;
}

async function compare(roots: [string, string], seconds: number, sliceMs: number): Promise<string> {
  const sides = [await open(roots[0]), await open(roots[1])];
  try {
    for (let i = 0; i < WARMUP_SLICES; i++) for (const side of sides) await slice(side, sliceMs);
    for (const side of sides) {
      side.ops = 0;
      side.ms = 0;
    }
    const end = Date.now() + seconds * 1000;
    for (let flip = false; Date.now() < end; flip = !flip) {
      const [first, second] = flip ? [sides[1], sides[0]] : [sides[0], sides[1]];
      await slice(first, sliceMs);
      await slice(second, sliceMs);
    }
    const rate = (side: Side) => (side.ops / side.ms) * 1000;
    const [a, b] = sides.map(rate);
    return [
      `A puts/s: ${Math.round(a).toLocaleString('en-US')}   (${roots[0]})`,
      `B puts/s: ${Math.round(b).toLocaleString('en-US')}   (${roots[1]})`,
      `B/A: ${(b / a).toFixed(3)}`,
    ].join('\n');
  } finally {
    for (const side of sides) {
      await side.node.close();
      rmSync(side.dir, { recursive: true, force: true });
    }
  }
}

if (isMain(import.meta.url)) {
  const [rootA, rootB, seconds = '20', sliceMs = '500'] = process.argv.slice(2);
  if (rootA === undefined || rootB === undefined) {
    console.error('usage: node .build/bench/embedded-ab.js ROOT_A ROOT_B [seconds] [sliceMs]');
    process.exit(2);
  }
  console.log(await compare([rootA, rootB], Number(seconds), Number(sliceMs)));
}
