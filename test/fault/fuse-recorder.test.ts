// The crash recorder (test/crash/fuse-recorder.ts) on a real FUSE mount: every operation done
// through the mount reaches the backing directory and the op log, in order; an O_DSYNC write is
// recorded as a write then an fsync; a hard link is one file under two names; LMDB with a shared writable map works on it; and the crash
// states built from the log (test/crash/crash-states.ts) agree with what was done — 'all' at the
// end is the backing directory byte for byte, 'none' at the end holds exactly what was fsynced,
// and LMDB opens the 'none' state with every key it had synced.
//
// Needs root and /dev/fuse (the recorder mounts with mount(8); there is no fusermount). Without
// them the test is skipped, unless TESSERA_REQUIRE_FUSE=1, when it fails.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { open } from 'lmdb';
import { type CrashState, crashState, writeCrashState } from '../crash/crash-states.js';
import { fuseUnavailable, isRecorderMount, startRecorder, unmount } from '../crash/fuse-recorder.js';
import { describeOp, isTwoPathOp, type Op, readOpLog } from '../crash/op-log.js';

const HINT = 'needs root and /dev/fuse to mount a FUSE file system (mount -t fuse)';
const LMDB_MAP_BYTES = 4 * 1024 * 1024;
const LMDB_KEYS = 200;
const PAGE_BYTES = 4096;

const unavailable = fuseUnavailable();
if (unavailable !== undefined && process.env.TESSERA_REQUIRE_FUSE === '1') {
  throw new Error(`the FUSE recorder test ${HINT}: ${unavailable}`);
}

test('the FUSE recorder passes operations through, records them, and yields faithful crash states', {
  skip: unavailable === undefined ? false : `${HINT}: ${unavailable}`,
  timeout: 120_000,
}, async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-fuse-'));
  const backing = path.join(base, 'backing');
  const mnt = path.join(base, 'mnt');
  const log = path.join(base, 'ops.log');
  fs.mkdirSync(backing);
  fs.mkdirSync(mnt);
  const startNs = process.hrtime.bigint();
  try {
    const recorder = await startRecorder({ backing, mount: mnt, log });
    try {
      plainFiles(mnt);
      await lmdbOnMount(path.join(mnt, 'lmdb'));
    } finally {
      await recorder.stop();
    }
    assert.equal(isRecorderMount(mnt), false, 'unmounted');
    const ops = readOpLog(fs.readFileSync(log));
    checkTimes(ops, startNs, process.hrtime.bigint());
    assert.deepEqual(ops.filter((op) => !isLmdb(op)).map(describeOp), PLAIN_OPS);
    checkLmdbOps(ops.filter(isLmdb));

    const all = crashState(ops, ops.length, { kind: 'all' });
    assert.deepEqual(all.dirs, dirsUnder(backing));
    assert.deepEqual(
      sorted(all.files),
      sorted(filesUnder(backing)),
      "'all' at the end is the backing directory",
    );

    const none = crashState(ops, ops.length, { kind: 'none' });
    assert.ok(none.pendingPieces > 0);
    for (const [file, content] of PLAIN_DURABLE) assert.deepEqual(none.files.get(file), content, file);
    assert.deepEqual(
      [...none.files.keys()].filter((f) => !f.startsWith('lmdb/')).sort(),
      [...PLAIN_DURABLE.keys()].sort(),
    );
    for (const [file, content] of PLAIN_LINKED) {
      assert.equal(all.files.get(file)?.toString(), content, `${file} in 'all'`);
    }
    await checkLmdbState(none, path.join(base, 'none'));
  } finally {
    if (isRecorderMount(mnt)) unmount(mnt);
    fs.rmSync(base, { recursive: true, force: true });
  }
});

/** Plain file operations through the mount; PLAIN_OPS is what the log must say of them. */
function plainFiles(mnt: string): void {
  const at = (p: string) => path.join(mnt, p);
  const fd = fs.openSync(at('a.txt'), 'w+');
  fs.writeSync(fd, 'hello world', 0);
  const back = Buffer.alloc(11);
  fs.readSync(fd, back, 0, back.length, 0);
  assert.equal(back.toString(), 'hello world');
  fs.fsyncSync(fd);
  fs.writeSync(fd, Buffer.alloc(5000, 'x'), 0, 5000, 4000);
  fs.closeSync(fd);
  fs.renameSync(at('a.txt'), at('b.txt'));
  fs.truncateSync(at('b.txt'), 6000);
  assert.equal(fs.statSync(at('b.txt')).size, 6000);

  fs.mkdirSync(at('sub'));
  const c = fs.openSync(at('sub/c.txt'), 'w');
  fs.writeSync(c, 'c data');
  fs.fsyncSync(c);
  fs.closeSync(c);
  const dir = fs.openSync(at('sub'), 'r');
  fs.fsyncSync(dir);
  fs.closeSync(dir);
  assert.deepEqual(fs.readdirSync(mnt).sort(), ['b.txt', 'sub']);
  assert.deepEqual(fs.readdirSync(at('sub')), ['c.txt']);

  const { O_CREAT, O_WRONLY, O_DSYNC } = fs.constants;
  const d = fs.openSync(at('d.txt'), O_CREAT | O_WRONLY | O_DSYNC, 0o644);
  fs.writeSync(d, 'dsync data');
  fs.closeSync(d);
  fs.writeFileSync(at('e.txt'), 'never synced');
  fs.writeFileSync(at('f.txt'), 'unlinked');
  fs.unlinkSync(at('f.txt'));
  assert.equal(fs.existsSync(at('f.txt')), false);

  // A hard link: one file under two names. Its data are recorded under its first name, g.txt.
  fs.writeFileSync(at('g.txt'), 'linked');
  fs.linkSync(at('g.txt'), at('sub/g-link.txt'));
  const [g, gLink] = [fs.statSync(at('g.txt')), fs.statSync(at('sub/g-link.txt'))];
  assert.equal(gLink.ino, g.ino, 'the same file');
  assert.equal(g.nlink, 2);
  const l = fs.openSync(at('sub/g-link.txt'), 'r+');
  fs.fsyncSync(l);
  fs.writeSync(l, '+more', 6);
  fs.closeSync(l);
  // Tessera's manifest writer: a temp file, linked to its final name (exclusive), then unlinked.
  const m = fs.openSync(at('m.tmp'), 'w');
  fs.writeSync(m, 'manifest');
  fs.fsyncSync(m);
  fs.closeSync(m);
  fs.linkSync(at('m.tmp'), at('m.json'));
  assert.throws(() => fs.linkSync(at('m.tmp'), at('m.json')), { code: 'EEXIST' });
  fs.unlinkSync(at('m.tmp'));
  for (const [file, content] of PLAIN_LINKED) assert.equal(fs.readFileSync(at(file), 'utf8'), content, file);
  assert.equal(fs.statSync(at('g.txt')).size, 11, 'the write through the link, seen through the other name');
  assert.equal(fs.statSync(at('m.json')).nlink, 1);
}

/** The linked files' content at the end, through the mount and in the 'all' state. */
const PLAIN_LINKED = new Map([
  ['g.txt', 'linked+more'],
  ['sub/g-link.txt', 'linked+more'],
  ['m.json', 'manifest'],
]);

const PLAIN_OPS = [
  'create a.txt',
  'write a.txt 0+11',
  'fsync a.txt',
  'write a.txt 4000+5000',
  'rename a.txt b.txt',
  'truncate b.txt 6000',
  'mkdir sub',
  'create sub/c.txt',
  'write sub/c.txt 0+6',
  'fsync sub/c.txt',
  'fsyncdir sub',
  'create d.txt',
  'write d.txt 0+10',
  'fsync datasync d.txt', // O_DSYNC: the kernel follows the WRITE with an FSYNC (datasync)
  'create e.txt',
  'write e.txt 0+12',
  'create f.txt',
  'write f.txt 0+8',
  'unlink f.txt',
  'create g.txt',
  'write g.txt 0+6',
  'link g.txt sub/g-link.txt',
  'fsync g.txt', // through sub/g-link.txt: the file's data are recorded under its first name
  'write g.txt 6+5',
  'create m.tmp',
  'write m.tmp 0+8',
  'fsync m.tmp',
  'link m.tmp m.json',
  'unlink m.tmp',
];

/** What 'none' at the end must hold of the plain files: what was fsynced, sizes as last set. */
const PLAIN_DURABLE = new Map<string, Buffer>([
  ['b.txt', Buffer.concat([Buffer.from('hello world'), Buffer.alloc(6000 - 11)])],
  ['sub/c.txt', Buffer.from('c data')],
  ['d.txt', Buffer.from('dsync data')],
  ['e.txt', Buffer.alloc(0)],
  ['g.txt', Buffer.from('linked')],
  ['sub/g-link.txt', Buffer.from('linked')],
  ['m.json', Buffer.from('manifest')],
]);

/** lmdb-js has `sync(callback)` (env.sync: an msync of the map, then fsync) but does not type it. */
interface EnvSync {
  sync(callback: (error?: Error | null) => void): void;
}

/** LMDB with a shared writable map (as the project opens it), synced with env.sync, then closed. */
async function lmdbOnMount(dir: string): Promise<void> {
  const root = open<string, string>(dir, { useWritemap: true, noSync: true, mapSize: LMDB_MAP_BYTES });
  root.transactionSync(() => {
    for (let i = 0; i < LMDB_KEYS; i++) root.putSync(`key-${i}`, valueFor(i));
  });
  await new Promise<void>((resolve, reject) =>
    (root as unknown as EnvSync).sync((e) => (e ? reject(e) : resolve())),
  );
  assert.equal(root.get('key-7'), valueFor(7));
  await root.close();
}

const valueFor = (i: number) => `value-${i}-`.repeat(20);
const isLmdb = (op: Op) => (isTwoPathOp(op) ? op.from : op.path).startsWith('lmdb');

/** LMDB's map pages reach us as WRITEs of whole pages (write-back), and env.sync as an FSYNC after them. */
function checkLmdbOps(ops: Op[]): void {
  const data = 'lmdb/data.mdb';
  const fsyncAt = ops.findIndex((op) => op.kind === 'fsync' && op.path === data);
  assert.ok(fsyncAt > 0, `an fsync of ${data}: ${ops.map(describeOp).join(', ')}`);
  const mapWrites = ops
    .slice(0, fsyncAt)
    .filter((op) => op.kind === 'write' && op.path === data && op.offset > 0);
  assert.ok(mapWrites.length > 0, 'map pages written back before the fsync');
  for (const op of mapWrites) {
    if (op.kind === 'write')
      assert.equal(op.offset % PAGE_BYTES, 0, `page-aligned write-back: ${describeOp(op)}`);
  }
  assert.ok(
    ops.some((op) => op.kind === 'truncate' && op.path === data && op.size === LMDB_MAP_BYTES),
    'map sized',
  );
}

/** The LMDB env in a crash state opens and holds every key, since all were synced. */
async function checkLmdbState(state: CrashState, dir: string): Promise<void> {
  writeCrashState(state, dir);
  const root = open<string, string>(path.join(dir, 'lmdb'), { readOnly: true });
  try {
    for (let i = 0; i < LMDB_KEYS; i++) assert.equal(root.get(`key-${i}`), valueFor(i), `key-${i}`);
  } finally {
    await root.close();
  }
}

function checkTimes(ops: Op[], startNs: bigint, endNs: bigint): void {
  for (let i = 0; i < ops.length; i++) {
    assert.ok(ops[i].atNs >= startNs && ops[i].atNs <= endNs, `op ${i} timestamp within the test`);
    if (i > 0) assert.ok(ops[i].atNs >= ops[i - 1].atNs, `op ${i} timestamp in order`);
  }
}

function filesUnder(root: string, rel = ''): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const entry of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
    const p = rel === '' ? entry.name : `${rel}/${entry.name}`;
    if (entry.isDirectory()) for (const [f, b] of filesUnder(root, p)) files.set(f, b);
    else files.set(p, fs.readFileSync(path.join(root, p)));
  }
  return files;
}

function dirsUnder(root: string, rel = ''): Set<string> {
  const dirs = new Set<string>();
  for (const entry of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const p = rel === '' ? entry.name : `${rel}/${entry.name}`;
    dirs.add(p);
    for (const d of dirsUnder(root, p)) dirs.add(d);
  }
  return dirs;
}

const sorted = (files: Map<string, Buffer>) => [...files].sort(([a], [b]) => (a < b ? -1 : 1));
