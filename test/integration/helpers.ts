// Shared helpers for tests that run real nodes on temp directories.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Priority, Reply } from '../../src/core/ops.js';
import { valueBytesOf } from '../../src/core/record.js';
import type { TesseraOptions } from '../../src/main/config.js';
import { Tessera } from '../../src/main/node.js';
import { resultError } from '../../src/main/result-error.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import { RESULT_HEADER_BYTES, resultStatus } from '../../src/threads/op-codec.js';
import { releasedAfterTests } from './children.js';

export const STORES: StoreKind[] = ['lmdb', 'level', 'memory'];
export const DURABLE_STORES: StoreKind[] = ['lmdb', 'level'];

/** A fresh temp directory; `cleanup()` removes it. */
export async function tempDir(label: string): Promise<{ path: string; cleanup: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), `tessera-${label}-`));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

/** Runs `body` against a node started on a fresh temp directory, then closes it and removes the directory. */
export async function withNode(
  label: string,
  options: Omit<TesseraOptions, 'dataDir'>,
  body: (node: Tessera) => Promise<void>,
): Promise<void> {
  const dir = await tempDir(label);
  const node = await Tessera.start({ ...options, dataDir: dir.path });
  const forget = releasedAfterTests(() => node.close());
  try {
    await body(node);
  } finally {
    forget();
    await node.close();
    await dir.cleanup();
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it returns true or `timeoutMs` passes. */
export async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** Root of the compiled test build (.build/), for spawning compiled scripts. */
export const BUILD_ROOT = new URL('../../', import.meta.url);

/** Reads `key` through this node's own worker (its copy, as READONLY does), not the serving replica's. */
export function readOnWorker(node: Tessera, key: string): Promise<string | undefined> {
  const dispatcher = node.dispatcher;
  const bytes = Buffer.from(key);
  return new Promise((resolve, reject) => {
    const error = dispatcher.submitRead(
      dispatcher.fragmentOf(bytes),
      bytes,
      Priority.Default,
      false,
      {
        onResult(_token, buf, at, length) {
          const status = resultStatus(buf, at);
          if (status === Reply.NotFound) return resolve(undefined);
          if (status !== Reply.Found) return reject(resultError(buf, at, length));
          resolve(Buffer.from(valueBytesOf(buf.subarray(at + RESULT_HEADER_BYTES, at + length))).toString());
        },
        onFailure: (_token, err) => reject(err),
      },
      undefined,
      true,
    );
    if (error !== undefined) reject(error);
  });
}
