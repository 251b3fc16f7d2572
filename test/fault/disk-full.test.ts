// A node whose disk fills up must keep running: writes refused with an error that says the disk is
// full, reads answered, every acknowledged write kept — and once space is freed, writes accepted
// again without a restart. (With LMDB's write map a full disk used to kill the node with SIGBUS
// at the first page LMDB touched that had no block behind it.)
//
// The node runs on a 32 MiB tmpfs mounted in a mount namespace of its own (`unshare`, util-linux),
// so nothing outside the test sees the mount and it vanishes with the namespace. It is filled with
// 64 KiB SETs until one fails, then the file system is grown and the node must take writes again;
// INFO, DBSIZE and SCAN must still answer while it is full;
// finally it is killed with SIGKILL and restarted, and must still hold every acknowledged write.
// In a two-node cluster whose second node has the small file system, the first must go on taking
// the writes of the fragments it serves, and once space is freed both copies must agree.

import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Redis } from 'ioredis';
import { freePorts } from '../../bench/ports.js';
import { killedAfterTests } from '../integration/children.js';
import { infoOf, localBuffers, NodeProcess } from '../integration/cluster-helpers.js';
import { eventually, tempDir } from '../integration/helpers.js';

const FS_BYTES_SMALL = 32 * 1024 * 1024;
const FS_BYTES_GROWN = 128 * 1024 * 1024;
const VALUE_BYTES = 64 * 1024;
/** SETs sent at once; the fill stops at the first batch with a failure. */
const BATCH = 8;
/** More than the small file system holds several times over: the fill must fail before. */
const WRITES_MAX = 4 * (FS_BYTES_SMALL / VALUE_BYTES);
const HINT = 'needs root (or user namespaces) for `unshare --mount` and a tmpfs mount';
/** Each test's limit, and when a run still going reports where it is (a diagnosis, not a wait). */
const TEST_TIMEOUT_MS = 120_000;
const HANG_REPORT_MS = TEST_TIMEOUT_MS - 10_000;

/** Whether this machine lets a process mount a tmpfs in a mount namespace of its own. */
function canMountPrivately(): boolean {
  try {
    const dir = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
    try {
      execFileSync(
        'unshare',
        [
          '--mount',
          '--propagation',
          'private',
          'sh',
          '-c',
          'mount -t tmpfs -o size=1m tessera-probe "$0"',
          dir,
        ],
        { stdio: 'ignore' },
      );
      return true;
    } finally {
      execFileSync('rmdir', [dir]);
    }
  } catch {
    return false;
  }
}

const available = canMountPrivately();
if (!available && process.env.TESSERA_REQUIRE_SMALL_FS === '1') throw new Error(`the disk-full test ${HINT}`);

/** A process holding a mount namespace with a small tmpfs at `dir`; nodes enter it with `launcher`. */
async function smallFileSystem(dir: string): Promise<{ launcher: string[]; grow(): void; close(): void }> {
  const holder: ChildProcess = killedAfterTests(
    spawn('unshare', ['--mount', '--propagation', 'private', 'sleep', '3600'], { stdio: 'ignore' }),
  );
  const pid = holder.pid;
  assert.ok(pid !== undefined, 'unshare started');
  const ownNamespace = readlinkSync('/proc/self/ns/mnt');
  // Until unshare has made the namespace, entering the process's would enter this one.
  await eventually(() => {
    try {
      return readlinkSync(`/proc/${pid}/ns/mnt`) !== ownNamespace;
    } catch {
      return false;
    }
  }, 5_000);
  const inside = (...command: string[]) =>
    execFileSync('nsenter', ['-t', String(pid), '-m', '--', ...command]);
  inside('mount', '-t', 'tmpfs', '-o', `size=${FS_BYTES_SMALL}`, 'tessera-disk-full', dir);
  return {
    launcher: ['nsenter', '-t', String(pid), '-m', '--'],
    grow: () => inside('mount', '-o', `remount,size=${FS_BYTES_GROWN}`, dir),
    close: () => holder.kill('SIGKILL'),
  };
}

/** Key i's value: bytes that do not compress (LevelDB compresses its tables), the same on every call. */
function valueFor(i: number): Buffer {
  const value = Buffer.allocUnsafe(VALUE_BYTES);
  let x = (i + 1) * 0x9e3779b1;
  for (let at = 0; at < VALUE_BYTES; at += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    value.writeInt32LE(x | 0, at);
  }
  return value;
}

/**
 * SETs k0… with their values, BATCH at a time, up to `count` (or through the first batch with a
 * failure, when `stopAtFailure`); returns the keys acknowledged and the first failure.
 */
async function writeValues(
  client: Redis,
  count: number,
  stopAtFailure: boolean,
): Promise<{ acknowledged: number[]; failure: string | undefined }> {
  const acknowledged: number[] = [];
  let failure: string | undefined;
  for (let i = 0; i < count && !(stopAtFailure && failure !== undefined); i += BATCH) {
    const batch = client.pipeline();
    for (let j = i; j < i + BATCH; j++) batch.set(`k${j}`, valueFor(j));
    const replies = (await batch.exec()) ?? [];
    replies.forEach(([error, reply], j) => {
      if (error === null && reply === 'OK') acknowledged.push(i + j);
      else failure ??= error?.message ?? String(reply);
    });
  }
  return { acknowledged, failure };
}

const SETUPS = [
  { store: 'lmdb', durability: 'store' },
  { store: 'lmdb', durability: 'stable' },
  { store: 'level', durability: 'store' },
  { store: 'level', durability: 'stable' },
] as const;

for (const { store, durability } of SETUPS) {
  test(`a full disk under ${store} at ${durability}: writes refused, reads served, nothing acknowledged lost, writes back once space is freed`, {
    skip: available ? false : HINT,
    timeout: TEST_TIMEOUT_MS,
  }, async () => {
    const dir = await tempDir(`disk-full-${store}-${durability}`);
    const mountDir = join(dir.path, 'fs');
    mkdirSync(mountDir);
    const fsHandle = await smallFileSystem(mountDir);
    const [port] = await freePorts(1);
    const node = new NodeProcess('n1', port, 0, join(mountDir, 'data'), [
      '--store',
      store,
      '--durability',
      durability,
      '--workers',
      '1',
    ]);
    // A run that hangs says where, with the node's last lines, before the test's timeout ends it.
    let stage = 'starting';
    const watchdog = setTimeout(
      () =>
        console.log(
          `${store} ${durability}: still ${stage}; the node logged last:\n${node.log.slice(-4000)}`,
        ),
      HANG_REPORT_MS,
    );
    watchdog.unref();
    try {
      await node.start({}, fsHandle.launcher);
      const client = await node.client();
      stage = 'filling the disk';
      const { acknowledged, failure } = await writeValues(client, WRITES_MAX, true);
      assert.ok(failure !== undefined, `the file system filled up within ${WRITES_MAX} writes`);
      assert.match(failure, /disk full|No space left on device/);
      console.log(`${store} ${durability}: ${acknowledged.length} writes acknowledged before: ${failure}`);

      // Still running, still reading.
      stage = 'reading on a full disk';
      assert.equal(await client.ping(), 'PONG');
      assert.equal(node.child?.exitCode, null);
      // A write larger than what is left: refused as well.
      await assert.rejects(
        client.set('refused', Buffer.alloc(2 * 1024 * 1024, 1)),
        /disk full|No space left on device/,
      );
      for (const i of acknowledged)
        assert.deepEqual(await client.getBuffer(`k${i}`), valueFor(i), `k${i} after the disk filled`);
      // INFO says the store is failing; DBSIZE, SCAN and KEYS (a filtered read over many keys, in
      // the background pool for lmdb) count and list what the node holds, its uncommitted writes too.
      stage = 'counting and listing on a full disk';
      assert.match(await client.info(), /aof_last_write_status:err/);
      assert.ok(Number(await client.dbsize()) >= acknowledged.length);
      const scanned = new Set<string>();
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor);
        for (const k of keys) scanned.add(k);
        cursor = next;
      } while (cursor !== '0');
      const listed = new Set(await client.keys('k*'));
      for (const i of acknowledged) {
        assert.ok(scanned.has(`k${i}`), `SCAN lists k${i}`);
        assert.ok(listed.has(`k${i}`), `KEYS lists k${i}`);
      }

      // Room again: the node takes writes without a restart.
      stage = 'writing once space is freed';
      fsHandle.grow();
      await eventually(async () => {
        try {
          return (await client.set('after', valueFor(7))) === 'OK';
        } catch {
          return false;
        }
      }, 30_000);

      stage = 'restarting';
      await node.stop('SIGKILL');
      await node.start({}, fsHandle.launcher);
      stage = 'reading after the restart';
      const restarted = await node.client();
      for (const i of acknowledged)
        assert.deepEqual(await restarted.getBuffer(`k${i}`), valueFor(i), `k${i} after the restart`);
      assert.deepEqual(await restarted.getBuffer('after'), valueFor(7));
      console.log(
        `${store} ${durability}: ${acknowledged.length + 1} acknowledged writes checked after the restart`,
      );
    } catch (err) {
      // Whether the node still ran, or how it ended, and what it logged last.
      const child = node.child;
      const state =
        child === undefined
          ? 'stopped'
          : (child.signalCode ?? (child.exitCode === null ? 'running' : `exit ${child.exitCode}`));
      console.log(
        `${store} ${durability}: failed while ${stage}; node ${state}; it logged last:\n${node.log.slice(-4000)}`,
      );
      throw err;
    } finally {
      clearTimeout(watchdog);
      await node.stop('SIGKILL');
      fsHandle.close();
      await dir.cleanup();
    }
  });
}

test('a replica whose disk fills: the other node goes on serving its fragments, and the replicas agree once space is freed', {
  skip: available ? false : HINT,
  timeout: 120_000,
}, async () => {
  const dir = await tempDir('disk-full-cluster');
  const mountDir = join(dir.path, 'fs');
  mkdirSync(mountDir);
  const fsHandle = await smallFileSystem(mountDir);
  const [port1, peer1, port2, peer2] = await freePorts(4);
  const peers = `n1@127.0.0.1:${peer1},n2@127.0.0.1:${peer2}`;
  const args = ['--peers', peers, '--workers', '1', '--fragments', '16', '--store', 'lmdb'];
  const n1 = new NodeProcess('n1', port1, peer1, join(dir.path, 'n1'), args);
  const n2 = new NodeProcess('n2', port2, peer2, join(mountDir, 'n2'), args);
  // Enough to fill n2's file system twice over: every write lands on both replicas.
  const writes = 2 * (FS_BYTES_SMALL / VALUE_BYTES);
  const keys = Array.from({ length: writes }, (_, i) => `k${i}`);
  try {
    await Promise.all([n1.start(), n2.start({}, fsHandle.launcher)]);
    await eventually(async () => (await infoOf(n1, 'replication')).get('connected_slaves') === '1', 20_000);
    const { acknowledged, failure } = await writeValues(await n1.client(), writes, false);
    assert.ok(failure !== undefined, `n2's file system filled up within ${writes} writes`);
    assert.match(failure, /disk full/);
    // n1 serves half the fragments itself, and the replica it cannot reach does not stop it.
    assert.ok(acknowledged.length > writes / 4, `${acknowledged.length} of ${writes} writes acknowledged`);
    assert.equal(n2.child?.exitCode, null);
    console.log(
      `cluster: ${acknowledged.length} of ${writes} writes acknowledged; first failure: ${failure}`,
    );

    fsHandle.grow();
    // Replication retries what n2 refused (and anti-entropy repairs the rest): the copies agree,
    // every acknowledged write in both.
    let copies: Array<Array<Buffer | null>> = [];
    await eventually(async () => {
      copies = await Promise.all([localBuffers(n1, keys), localBuffers(n2, keys)]);
      return copies[0].every((v, i) =>
        v === null ? copies[1][i] === null : v.equals(copies[1][i] ?? Buffer.alloc(0)),
      );
    }, 60_000);
    for (const i of acknowledged) {
      assert.deepEqual(copies[0][i], valueFor(i), `k${i} on n1`);
      assert.deepEqual(copies[1][i], valueFor(i), `k${i} on n2`);
    }
    console.log(
      `cluster: both replicas agree on ${writes} keys; ${acknowledged.length} acknowledged ones checked`,
    );
  } finally {
    await Promise.all([n1.stop('SIGKILL'), n2.stop('SIGKILL')]);
    fsHandle.close();
    await dir.cleanup();
  }
});
