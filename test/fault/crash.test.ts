// Crash safety (DESIGN.md "Durability"): a child writing at `store` or `stable` durability is killed
// with SIGKILL mid-stream; after a restart on the same directory every acknowledged write is there.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tessera } from '../../src/main/node.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import { killedAfterTests } from '../integration/children.js';
import { tempDir } from '../integration/helpers.js';

const WRITER = fileURLToPath(new URL('./crash-writer.js', import.meta.url));
/** Acknowledgements to wait for before the kill, and a time bound in case the machine is slow. */
const ACKS_BEFORE_KILL = 3000;
const KILL_AFTER_MS = 8000;

async function crashWhileWriting(
  store: StoreKind,
  dataDir: string,
  durability: string,
): Promise<Set<number>> {
  const child = killedAfterTests(
    spawn(process.execPath, [WRITER, store, dataDir, durability], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  const acked = new Set<number>();
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.on('exit', (_code, signal) => resolve(signal)),
  );
  const lines = createInterface({ input: child.stdout });
  const timer = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
  for await (const line of lines) {
    if (line.startsWith('ack ')) acked.add(Number(line.slice(4)));
    if (acked.size >= ACKS_BEFORE_KILL) {
      child.kill('SIGKILL');
      break;
    }
  }
  clearTimeout(timer);
  assert.equal(await exited, 'SIGKILL', 'the writer died by SIGKILL, mid-stream');
  return acked;
}

for (const [store, durability] of [
  ['lmdb', 'store'],
  ['lmdb', 'stable'],
  ['level', 'store'],
  ['level', 'stable'],
] as const) {
  test(`SIGKILL while writing to ${store} at ${durability}: every acknowledged write survives`, async () => {
    const dir = await tempDir(`crash-${store}-${durability}`);
    try {
      const acked = await crashWhileWriting(store, dir.path, durability);
      assert.ok(acked.size > 0, 'the writer acknowledged writes before it was killed');
      const node = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
      try {
        const ids = [...acked];
        const values = await node.getMany(ids.map((i) => `key-${i}`));
        const missing = ids.filter(
          (id, n) => !(values[n].ok && values[n].value?.toString() === `value-${id}`),
        );
        console.log(
          `${store}/${durability}: checked ${ids.length} acknowledged writes, ${missing.length} missing`,
        );
        assert.deepEqual(missing, []);
      } finally {
        await node.close();
      }
    } finally {
      await dir.cleanup();
    }
  });
}
