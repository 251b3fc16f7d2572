// Power-loss crash states from hand-built op logs (test/crash/crash-states.ts), and the op log's
// byte format (test/crash/op-log.ts). No file system, no mount: the recorder's own test is
// test/fault/fuse-recorder.test.ts.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import {
  type CrashChoice,
  CrashStateBuilder,
  crashState,
  opIndexAt,
  PAGE_BYTES,
  SECTOR_BYTES,
  tornLength,
  writeCrashState,
} from '../crash/crash-states.js';
import { encodeOp, encodeOpLog, type Op, OpLogError, readOpLog } from '../crash/op-log.js';

let clock = 0n;
const at = () => ++clock;
const create = (p: string): Op => ({ kind: 'create', atNs: at(), path: p });
const mkdir = (p: string): Op => ({ kind: 'mkdir', atNs: at(), path: p });
const unlink = (p: string): Op => ({ kind: 'unlink', atNs: at(), path: p });
const rmdir = (p: string): Op => ({ kind: 'rmdir', atNs: at(), path: p });
const rename = (from: string, to: string): Op => ({ kind: 'rename', atNs: at(), from, to });
const link = (from: string, to: string): Op => ({ kind: 'link', atNs: at(), from, to });
const fsync = (p: string, dir = false): Op => ({ kind: 'fsync', atNs: at(), path: p, datasync: false, dir });
const truncate = (p: string, size: number): Op => ({ kind: 'truncate', atNs: at(), path: p, size });
const write = (p: string, offset: number, data: Buffer | string): Op => ({
  kind: 'write',
  atNs: at(),
  path: p,
  offset,
  data: typeof data === 'string' ? Buffer.from(data) : data,
});
/** `n` bytes of `byte`. */
const fill = (n: number, byte: number) => Buffer.alloc(n, byte);

const NONE: CrashChoice = { kind: 'none' };
const ALL: CrashChoice = { kind: 'all' };
const end = (ops: Op[], choice: CrashChoice) => crashState(ops, ops.length, choice);
const text = (ops: Op[], choice: CrashChoice, p: string) => end(ops, choice).files.get(p)?.toString();

describe('crash states', () => {
  it('keeps a fsynced write in every state', () => {
    const ops = [create('a'), write('a', 0, 'durable'), fsync('a')];
    for (const choice of [
      NONE,
      ALL,
      { kind: 'subset', seed: 7 } as const,
      { kind: 'prefix', count: 0 } as const,
    ]) {
      assert.equal(text(ops, choice, 'a'), 'durable');
    }
    assert.equal(end(ops, NONE).pendingPieces, 0);
  });

  it('drops a write after the last fsync in "none" and keeps it in "all"', () => {
    const ops = [create('a'), write('a', 0, 'one'), fsync('a'), write('a', 3, 'two')];
    assert.equal(text(ops, NONE, 'a'), 'one');
    assert.equal(text(ops, ALL, 'a'), 'onetwo');
    assert.equal(end(ops, NONE).pendingPieces, 1);
  });

  it('crashes just before op k', () => {
    const ops = [create('a'), write('a', 0, 'x'), fsync('a'), unlink('a')];
    assert.equal(crashState(ops, 0, ALL).files.size, 0);
    assert.equal(crashState(ops, 2, NONE).files.get('a')?.length, 0, 'the write is pending before the fsync');
    assert.equal(crashState(ops, 3, NONE).files.get('a')?.toString(), 'x');
    assert.equal(crashState(ops, 4, ALL).files.has('a'), false);
    assert.throws(() => crashState(ops, 5, ALL), RangeError);
  });

  it('"prefix" keeps exactly the first pieces across files in issue order', () => {
    const ops = [
      create('a'),
      create('b'),
      write('a', 0, 'A1'),
      write('b', 0, 'B1'),
      write('a', 2, 'A2'),
      write('b', 2, 'B2'),
    ];
    const states = [0, 1, 2, 3, 4].map((count) => end(ops, { kind: 'prefix', count }));
    const seen = states.map((s) => `${s.files.get('a')}|${s.files.get('b')}`);
    assert.deepEqual(seen, ['|', 'A1|', 'A1|B1', 'A1A2|B1', 'A1A2|B1B2']);
  });

  it('"subset" is replayable from its seed and differs across seeds', () => {
    const ops: Op[] = [create('a')];
    for (let i = 0; i < 32; i++) ops.push(write('a', i * PAGE_BYTES, fill(PAGE_BYTES, i + 1)));
    const image = (seed: number) => end(ops, { kind: 'subset', seed }).files.get('a')!;
    assert.deepEqual(image(1), image(1));
    const distinct = new Set([1, 2, 3, 4, 5].map((seed) => image(seed).toString('hex')));
    assert.ok(distinct.size > 1, 'different seeds give different states');
    const kept = pagesKept(image(1));
    assert.ok(kept > 0 && kept < 32, `about half the pages kept, got ${kept}`);
  });

  it('cuts torn pieces at sector boundaries', () => {
    const ops: Op[] = [create('a')];
    for (let i = 0; i < 16; i++) ops.push(write('a', i * PAGE_BYTES + 100, fill(PAGE_BYTES - 100, 0xff)));
    for (let seed = 0; seed < 20; seed++) {
      const a = end(ops, { kind: 'subset-torn', seed }).files.get('a')!;
      for (let page = 0; page * PAGE_BYTES < a.length; page++) {
        const bytes = a.subarray(page * PAGE_BYTES + 100, (page + 1) * PAGE_BYTES);
        const kept = bytes.indexOf(0) < 0 ? bytes.length : bytes.indexOf(0);
        assert.ok(
          kept === 0 || (100 + kept) % SECTOR_BYTES === 0,
          `seed ${seed} page ${page}: ${kept} bytes kept`,
        );
        assert.equal(bytes.subarray(kept).indexOf(0xff), -1, 'a torn piece keeps a prefix');
      }
    }
    assert.equal(tornLength({ offset: 100, end: 300 }, 0.99), 200, 'no boundary inside: whole piece');
    assert.equal(tornLength({ offset: 100, end: 1100 }, 0), SECTOR_BYTES - 100);
    assert.equal(tornLength({ offset: 0, end: 4096 }, 0.999), 4096);
  });

  it('splits writes straddling page boundaries', () => {
    // 100 bytes before the first boundary, a whole page, 50 bytes after: three pieces.
    const ops = [create('a'), write('a', PAGE_BYTES - 100, fill(100 + PAGE_BYTES + 50, 7))];
    assert.equal(end(ops, NONE).pendingPieces, 3);
    const first = end(ops, { kind: 'prefix', count: 1 }).files.get('a')!;
    assert.equal(first.length, PAGE_BYTES, 'only the first piece extends the file');
    assert.deepEqual(first.subarray(PAGE_BYTES - 100), fill(100, 7));
    assert.equal(end(ops, { kind: 'prefix', count: 2 }).files.get('a')!.length, 2 * PAGE_BYTES);
    assert.equal(end(ops, ALL).files.get('a')!.length, 2 * PAGE_BYTES + 50);
    assert.equal(end(ops, NONE).files.get('a')!.length, 0, 'an unkept extending write does not lengthen');
  });

  it('applies truncates at once', () => {
    const ops = [create('a'), write('a', 0, 'abcdef'), fsync('a'), truncate('a', 3), write('a', 10, 'z')];
    assert.equal(text(ops, NONE, 'a'), 'abc');
    assert.equal(text(ops, ALL, 'a'), 'abc\0\0\0\0\0\0\0z');
    const grown = [create('b'), truncate('b', 8192)];
    assert.deepEqual(end(grown, NONE).files.get('b'), Buffer.alloc(8192));
    const cut = [create('c'), write('c', 0, 'keep+tail'), truncate('c', 4), truncate('c', 9)];
    assert.equal(text(cut, ALL, 'c'), 'keep\0\0\0\0\0', 'bytes cut by a truncate read back as zeros');
  });

  it('carries pending pieces through a rename and drops them with an unlink', () => {
    const ops = [create('a'), write('a', 0, 'pending'), rename('a', 'b'), fsync('b'), write('b', 7, '!')];
    assert.equal(text(ops, NONE, 'b'), 'pending', 'the fsync under the new name covers the old write');
    assert.equal(end(ops, ALL).files.has('a'), false);
    assert.equal(text(ops, ALL, 'b'), 'pending!');
    const gone = [create('x'), write('x', 0, 'data'), unlink('x'), create('x')];
    assert.equal(end(gone, ALL).files.get('x')?.length, 0, 'a new file at the path does not inherit');
    assert.equal(end(gone, ALL).pendingPieces, 0);
    const over = [
      create('t'),
      write('t', 0, 'old'),
      fsync('t'),
      create('n'),
      write('n', 0, 'new'),
      rename('n', 't'),
    ];
    assert.equal(text(over, NONE, 't'), '', 'renamed over: the old file is gone, the new one unsynced');
    assert.equal(text(over, ALL, 't'), 'new');
  });

  it('keeps a hard-linked file and its pending pieces under the new name when the old is unlinked', () => {
    const ops = [
      create('a'),
      write('a', 0, 'durable'),
      fsync('a'),
      write('a', 7, '+pending'),
      link('a', 'b'),
      unlink('a'),
    ];
    for (const choice of [NONE, ALL]) assert.equal(end(ops, choice).files.has('a'), false);
    assert.equal(text(ops, NONE, 'b'), 'durable');
    assert.equal(text(ops, ALL, 'b'), 'durable+pending');
    assert.equal(end(ops, NONE).pendingPieces, 1, 'the pending write outlives the old name');
    const both = crashState(ops, ops.length - 1, ALL);
    assert.equal(both.files.get('a')?.toString(), 'durable+pending', 'before the unlink: both names');
    assert.equal(both.files.get('b')?.toString(), 'durable+pending');
    const gone = [...ops, write('b', 0, 'D'), unlink('b'), create('b')];
    assert.equal(end(gone, ALL).pendingPieces, 0, 'the last name unlinked: the pieces go');
    assert.equal(text(gone, ALL, 'b'), '');
  });

  it('makes a write through one name of a linked file visible through the other', () => {
    const ops = [create('a'), link('a', 'b'), write('b', 0, 'via b'), fsync('a'), write('a', 5, '!')];
    for (const [choice, want] of [
      [NONE, 'via b'],
      [ALL, 'via b!'],
    ] as const) {
      assert.equal(text(ops, choice, 'a'), want, 'the fsync through a covers the write through b');
      assert.equal(text(ops, choice, 'b'), want);
    }
    const renamed = [...ops, rename('a', 'b')];
    assert.deepEqual(
      [...end(renamed, ALL).files.keys()].sort(),
      ['a', 'b'],
      'a rename between two names of one file changes nothing',
    );
    const over = [...ops, create('c'), write('c', 0, 'c'), rename('c', 'a')];
    assert.equal(text(over, ALL, 'a'), 'c', 'renamed over: the name is the new file');
    assert.equal(text(over, ALL, 'b'), 'via b!', 'and the other name keeps the linked file');
  });

  it('counts the pending pieces of a file with several names once', () => {
    const ops = [
      create('a'),
      write('a', 0, fill(2 * PAGE_BYTES, 1)),
      link('a', 'b'),
      mkdir('d'),
      link('b', 'd/c'),
    ];
    assert.equal(end(ops, NONE).pendingPieces, 2);
    const first = end(ops, { kind: 'prefix', count: 1 });
    for (const name of ['a', 'b', 'd/c']) {
      assert.deepEqual(first.files.get(name), fill(PAGE_BYTES, 1), `${name}: the first piece only`);
    }
    for (let seed = 0; seed < 8; seed++) {
      const s = end(ops, { kind: 'subset', seed });
      assert.deepEqual(s.files.get('b'), s.files.get('a'), `seed ${seed}: one choice for every name`);
      assert.deepEqual(s.files.get('d/c'), s.files.get('a'), `seed ${seed}`);
    }
    assert.equal(end([...ops, unlink('a'), unlink('b')], NONE).pendingPieces, 2, 'd/c still names it');
  });

  it('moves files with a renamed directory and tracks directories', () => {
    const ops = [
      mkdir('d'),
      mkdir('d/e'),
      create('d/e/f'),
      write('d/e/f', 0, 'x'),
      rename('d', 'g'),
      mkdir('h'),
      rmdir('h'),
    ];
    const s = end(ops, ALL);
    assert.deepEqual([...s.dirs].sort(), ['g', 'g/e']);
    assert.deepEqual([...s.files.keys()], ['g/e/f']);
    assert.equal(s.files.get('g/e/f')?.toString(), 'x');
  });

  it('builds states at increasing k from one walk, and again from the start', () => {
    const ops = [
      create('a'),
      write('a', 0, 'one'),
      fsync('a'),
      write('a', 3, 'two'),
      fsync('a'),
      write('a', 6, '3'),
    ];
    const builder = new CrashStateBuilder(ops);
    const seen = [1, 3, 4, 6, 2].map((k) => builder.at(k, NONE).files.get('a')?.toString());
    assert.deepEqual(seen, ['', 'one', 'one', 'onetwo', '']);
    assert.equal(builder.at(6, ALL).files.get('a')?.toString(), 'onetwo3');
  });

  it('finds the crash point of a moment', () => {
    const ops = [create('a'), create('b'), create('c')];
    assert.equal(opIndexAt(ops, ops[0].atNs - 1n), 0);
    assert.equal(opIndexAt(ops, ops[1].atNs), 2);
    assert.equal(opIndexAt(ops, ops[2].atNs + 10n), 3);
  });

  it('writes a state to disk, leaving zero pages as holes', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-crash-state-'));
    try {
      const big = 64 * PAGE_BYTES;
      const ops = [
        mkdir('d'),
        create('d/f'),
        truncate('d/f', big),
        write('d/f', 5 * PAGE_BYTES + 1, 'x'),
        create('e'),
        write('e', 0, 'e'),
        link('e', 'd/e2'),
      ];
      writeCrashState(end(ops, ALL), dir);
      const f = fs.readFileSync(path.join(dir, 'd/f'));
      assert.equal(f.length, big);
      assert.equal(f[5 * PAGE_BYTES + 1], 'x'.charCodeAt(0));
      assert.equal(fs.readFileSync(path.join(dir, 'e'), 'utf8'), 'e');
      assert.equal(fs.readFileSync(path.join(dir, 'd/e2'), 'utf8'), 'e', 'each name written out');
      assert.ok(fs.statSync(path.join(dir, 'd/f')).blocks * 512 < big, 'sparse');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('op log', () => {
  const sample = (): Op[] => [
    mkdir('d'),
    create('d/f'),
    write('d/f', 12345, 'payload'),
    { kind: 'fsync', atNs: at(), path: 'd/f', datasync: true, dir: false },
    fsync('d', true),
    truncate('d/f', 2 ** 40),
    rename('d/f', 'd/g'),
    link('d/g', 'd/h'),
    unlink('d/g'),
    unlink('d/h'),
    rmdir('d'),
  ];

  it('round-trips through encode and readOpLog', () => {
    const ops = sample();
    assert.deepEqual(readOpLog(encodeOpLog(ops)), ops);
    assert.deepEqual(readOpLog(encodeOpLog([])), []);
  });

  it('rejects a truncated log', () => {
    const bytes = encodeOpLog(sample());
    for (const cut of [3, 8 + 10, bytes.length - 1]) {
      assert.throws(() => readOpLog(bytes.subarray(0, cut)), OpLogError, `cut at ${cut}`);
    }
  });

  it('rejects a garbled log', () => {
    const ops = sample();
    const bytes = encodeOpLog(ops);
    const third = 8 + encodeOp(ops[0]).length + encodeOp(ops[1]).length;
    for (const at of [0, third + 4, third + 8, third + 20, third + 45, bytes.length - 1]) {
      const garbled = Buffer.from(bytes);
      garbled[at] ^= 0x40;
      assert.throws(() => readOpLog(garbled), OpLogError, `byte ${at} flipped`);
    }
  });
});

/** How many whole pages of `image` are not zero. */
function pagesKept(image: Buffer): number {
  let kept = 0;
  for (let at = 0; at < image.length; at += PAGE_BYTES) if (image[at] !== 0) kept++;
  return kept;
}
