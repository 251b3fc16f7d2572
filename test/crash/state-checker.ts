// Child process of the power-loss simulator (power-loss.ts): starts on each crash state it is
// given and reads back every key, as a node restarted after the power loss would serve them.
// Reads one JSON job per line on stdin and answers one JSON line per job on stdout:
//
//   { "subject": "node", "store": "lmdb" | "level", "dir": "…", "keys": ["k1", …] }
//   { "subject": "raw-lmdb-writemap", "dir": "…", "keys": [...] }
//   → { "values": ["k1=12", null, …] }  or  { "refused": "the node's start error" }
//
// The simulator runs it with LMDB_RESTORE=safe: lmdb-js then opens an env as after a reboot (a new
// boot id), at its newest flushed state, which is what a real power loss leads to. A crash of this
// process (LMDB reading a damaged page can take it down) is seen by the simulator as the job's answer.

import { createInterface } from 'node:readline';
import { open } from 'lmdb';
import { Tessera } from '../../src/main/node.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import { NODE_FRAGMENTS } from './history.js';
import { RAW_WRITEMAP_OPTIONS } from './raw-lmdb-writer.js';

export interface CheckJob {
  subject: 'node' | 'raw-lmdb-writemap';
  store?: StoreKind;
  dir: string;
  keys: string[];
}

export type CheckAnswer = { values: Array<string | null> } | { refused: string };

async function readNode(job: CheckJob): Promise<Array<string | null>> {
  const node = await Tessera.start({
    store: job.store,
    dataDir: job.dir,
    workers: 1,
    fragments: NODE_FRAGMENTS,
  });
  try {
    const settled = await node.getMany(job.keys);
    return settled.map((s, i) => {
      if (!s.ok) throw new Error(`reading ${job.keys[i]}: ${s.error.message}`);
      return s.value === undefined ? null : s.value.toString();
    });
  } finally {
    await node.close();
  }
}

async function readRaw(job: CheckJob): Promise<Array<string | null>> {
  const root = open<string, string>(job.dir, RAW_WRITEMAP_OPTIONS);
  try {
    return job.keys.map((key) => root.get(key) ?? null);
  } finally {
    await root.close();
  }
}

async function answer(job: CheckJob): Promise<CheckAnswer> {
  try {
    return { values: job.subject === 'node' ? await readNode(job) : await readRaw(job) };
  } catch (err) {
    return { refused: err instanceof Error ? err.message : String(err) };
  }
}

if (process.argv[1]?.endsWith('state-checker.js')) {
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() === '') continue;
    process.stdout.write(`${JSON.stringify(await answer(JSON.parse(line) as CheckJob))}\n`);
  }
}
