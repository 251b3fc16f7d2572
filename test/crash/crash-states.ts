// Power-loss crash states from an op log (./op-log.ts): what a disk may hold if power is lost just
// before op k of a recording, for a chosen subset of the data that had not been fsynced yet.
//
// The model, and the assumptions it rests on:
//
// - Data: a file's durable content is the result of every op on it up to its last fsync before k
//   (fsync and fdatasync alike). Its writes after that fsync are pending: each is cut into pieces at
//   4096-byte page boundaries (a write covering part of a page is a piece covering that part), and
//   a crash state keeps any subset of the pending pieces — the page cache writes pages back in any
//   order and a power loss stops it anywhere. 'subset-torn' also lets a kept piece be cut short at
//   a 512-byte sector boundary (a page half written when the power went). The model is a superset
//   of what the page cache can do: it may keep a later piece of a page without an earlier one,
//   which real write-back (whole pages, latest content) cannot.
// - Metadata: namespace ops (create, mkdir, unlink, rmdir, rename, link) and size changes (truncate,
//   fallocate) take effect at once and in order in every crash state. That is what the journaling
//   file systems we run on give: ext4 (data=ordered) and xfs commit metadata to their journal in
//   order, so after a crash the namespace and sizes are those of some point in the op order — and
//   we take the latest. (A real crash can also lose recent metadata that was never fsynced; this
//   model does not explore that.) A pending write that extends a file makes it longer only in the
//   states that keep the piece, up to that piece's end.
// - Files follow renames: a file's pending pieces go with it to its new path, and an unlinked (or
//   renamed-over) file's pending pieces go away with it.
// - Hard links: a link gives the file a second name, the same file under both (a write or fsync
//   through either name is one change to the one file). An unlink or rename-over removes only that
//   name; the file, and its pending pieces, go away with its last name. A file's pieces are counted
//   once however many names it has.
// - The recording starts on an empty directory: a path the log never created is created, empty, on
//   its first write or truncate (or link from it).
//
// CrashStateBuilder walks the log forward once and keeps each file's durable image (sparse: only
// pages ever written are held, so LMDB's map file, ftruncated to its full map size, costs what was
// written), so many states at increasing k cost one walk plus one image copy each.

import { closeSync, ftruncateSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { seededFractions } from '../unit/fixtures/xorshift32.js';
import type { Op } from './op-log.js';

export const PAGE_BYTES = 4096;
export const SECTOR_BYTES = 512;

export type CrashChoice =
  | { kind: 'none' }
  | { kind: 'all' }
  /** The first `count` pending pieces across all files, in the order they were issued. */
  | { kind: 'prefix'; count: number }
  /** As 'prefix', of the first `share` (0..1) of the pending pieces, however many there are. */
  | { kind: 'prefix-share'; share: number }
  /** Each pending piece kept with probability 1/2. */
  | { kind: 'subset'; seed: number }
  /** As 'subset', and a kept piece keeps a random number of its leading sectors. */
  | { kind: 'subset-torn'; seed: number };

export interface CrashState {
  /** Relative path → content, for every file that exists; each name of a hard-linked file, with the same content. */
  files: Map<string, Buffer>;
  /** Every directory that exists, the root ('') excepted. */
  dirs: Set<string>;
  /** How many pending pieces the choice chose from. */
  pendingPieces: number;
}

/** The crash state just before op `k` (`ops.length`: after the last op). */
export function crashState(ops: readonly Op[], k: number, choice: CrashChoice): CrashState {
  return new CrashStateBuilder(ops).at(k, choice);
}

/** The first op index whose request arrived after `atNs` (a crash at that moment happens before it). */
export function opIndexAt(ops: readonly Op[], atNs: bigint): number {
  let lo = 0;
  let hi = ops.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ops[mid].atNs <= atNs) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A page-aligned part of a pending write: bytes [offset, end) of the file. */
interface Piece {
  write: PendingWrite;
  offset: number;
  end: number;
}

interface PendingWrite {
  kind: 'write';
  index: number;
  offset: number;
  data: Buffer;
}

type Pending = PendingWrite | { kind: 'truncate'; size: number };

class FileModel {
  readonly durable = new SparseImage();
  pending: Pending[] = [];

  /** fsync: every pending op becomes durable. */
  sync(): void {
    for (const p of this.pending) {
      if (p.kind === 'write') this.durable.write(p.offset, p.data);
      else this.durable.setSize(p.size);
    }
    this.pending = [];
  }
}

/** Builds crash states of one recording; states asked for at increasing k share one walk of the log. */
export class CrashStateBuilder {
  readonly #ops: readonly Op[];
  #cursor = 0;
  #files = new Map<string, FileModel>();
  #dirs = new Set<string>();

  constructor(ops: readonly Op[]) {
    this.#ops = ops;
  }

  /** The crash state just before op `k`. A k below the previous one replays the log from the start. */
  at(k: number, choice: CrashChoice): CrashState {
    if (!Number.isInteger(k) || k < 0 || k > this.#ops.length) {
      throw new RangeError(`crash point ${k} outside 0..${this.#ops.length}`);
    }
    if (k < this.#cursor) this.#reset();
    while (this.#cursor < k) this.#apply(this.#ops[this.#cursor], this.#cursor++);
    const pieces = this.#pendingPieces();
    const kept = keptRanges(pieces, chooseKept(pieces, choice));
    const files = new Map<string, Buffer>();
    for (const [path, file] of this.#files) files.set(path, materialise(file, kept));
    return { files, dirs: new Set(this.#dirs), pendingPieces: pieces.length };
  }

  #reset(): void {
    this.#cursor = 0;
    this.#files = new Map();
    this.#dirs = new Set();
  }

  #apply(op: Op, index: number): void {
    switch (op.kind) {
      case 'write':
        this.#file(op.path).pending.push({ kind: 'write', index, offset: op.offset, data: op.data });
        return;
      case 'truncate':
        this.#file(op.path).pending.push({ kind: 'truncate', size: op.size });
        return;
      case 'fsync':
        // A directory fsync changes nothing here: namespace ops are already in every state.
        if (!op.dir) this.#files.get(op.path)?.sync();
        return;
      case 'create':
        this.#file(op.path);
        return;
      case 'mkdir':
        this.#addDir(op.path);
        return;
      case 'unlink':
        this.#files.delete(op.path);
        return;
      case 'rmdir':
        this.#dirs.delete(op.path);
        return;
      case 'rename':
        this.#rename(op.from, op.to);
        return;
      case 'link':
        this.#link(op.from, op.to);
        return;
    }
  }

  /** `to` becomes another name of the file at `from` (link(2) needs `to` not to exist; if it does, it is replaced). */
  #link(from: string, to: string): void {
    if (from === to) return;
    this.#files.set(to, this.#file(from));
  }

  #file(path: string): FileModel {
    let file = this.#files.get(path);
    if (file === undefined) {
      this.#addDir(parentOf(path));
      this.#files.set(path, (file = new FileModel()));
    }
    return file;
  }

  #addDir(path: string): void {
    for (let p = path; p !== '' && !this.#dirs.has(p); p = parentOf(p)) this.#dirs.add(p);
  }

  #rename(from: string, to: string): void {
    if (from === to) return; // rename(2) onto itself changes nothing
    const file = this.#files.get(from);
    if (file !== undefined) {
      // rename(2) between two names of one file does nothing: both names stay.
      if (this.#files.get(to) === file) return;
      this.#files.delete(from);
      this.#files.set(to, file); // a file renamed over another replaces it, pending pieces and all
      return;
    }
    if (!this.#dirs.has(from)) return; // not something this recording made
    const moved = (p: string) => p === from || p.startsWith(`${from}/`);
    const renamed = (p: string) => to + p.slice(from.length);
    this.#dirs.delete(to); // rename(2) over a directory needs it empty
    for (const d of [...this.#dirs].filter(moved)) {
      this.#dirs.delete(d);
      this.#dirs.add(renamed(d));
    }
    for (const [p, f] of [...this.#files].filter(([p]) => moved(p))) {
      this.#files.delete(p);
      this.#files.set(renamed(p), f);
    }
  }

  /** Every live file's pending writes, cut into page pieces, in issue order; a file with several names once. */
  #pendingPieces(): Piece[] {
    const writes: PendingWrite[] = [];
    for (const file of new Set(this.#files.values())) {
      for (const p of file.pending) if (p.kind === 'write') writes.push(p);
    }
    writes.sort((a, b) => a.index - b.index);
    return writes.flatMap(splitIntoPieces);
  }
}

/** Cuts a write at page boundaries. */
function splitIntoPieces(write: PendingWrite): Piece[] {
  const pieces: Piece[] = [];
  const end = write.offset + write.data.length;
  for (let at = write.offset; at < end; ) {
    const next = Math.min(end, (Math.floor(at / PAGE_BYTES) + 1) * PAGE_BYTES);
    pieces.push({ write, offset: at, end: next });
    at = next;
  }
  return pieces;
}

/** For each piece (by position), how many of its leading bytes the crash state keeps. */
function chooseKept(pieces: readonly Piece[], choice: CrashChoice): number[] {
  const all = (p: Piece) => p.end - p.offset;
  switch (choice.kind) {
    case 'none':
      return pieces.map(() => 0);
    case 'all':
      return pieces.map(all);
    case 'prefix':
      return pieces.map((p, i) => (i < choice.count ? all(p) : 0));
    case 'prefix-share': {
      const count = Math.floor(choice.share * pieces.length);
      return pieces.map((p, i) => (i < count ? all(p) : 0));
    }
    case 'subset': {
      const random = seededFractions(choice.seed);
      return pieces.map((p) => (random() < 0.5 ? all(p) : 0));
    }
    case 'subset-torn': {
      const random = seededFractions(choice.seed);
      return pieces.map((p) => (random() < 0.5 ? tornLength(p, random()) : 0));
    }
  }
}

/**
 * A kept piece cut at a sector boundary: the cut is one of the 512-byte boundaries inside the
 * piece or its end, picked by `r` in [0, 1). At least one sector (or the whole piece) is kept.
 */
export function tornLength(p: { offset: number; end: number }, r: number): number {
  const firstBoundary = (Math.floor(p.offset / SECTOR_BYTES) + 1) * SECTOR_BYTES;
  const inside = firstBoundary < p.end ? Math.floor((p.end - 1 - firstBoundary) / SECTOR_BYTES) + 1 : 0;
  const pick = Math.floor(r * (inside + 1));
  const cut = pick < inside ? firstBoundary + pick * SECTOR_BYTES : p.end;
  return cut - p.offset;
}

type KeptRanges = Map<PendingWrite, Array<[from: number, to: number]>>;

/** The kept byte ranges of each pending write, from the kept length of each piece. */
function keptRanges(pieces: readonly Piece[], kept: readonly number[]): KeptRanges {
  const ranges: KeptRanges = new Map();
  pieces.forEach((p, i) => {
    if (kept[i] === 0) return;
    const list = ranges.get(p.write) ?? [];
    list.push([p.offset, p.offset + kept[i]]);
    ranges.set(p.write, list);
  });
  return ranges;
}

/** A file's content in a crash state: its durable image, then its pending ops with the kept pieces. */
function materialise(file: FileModel, kept: KeptRanges): Buffer {
  const image = file.durable.toFlat();
  for (const p of file.pending) {
    if (p.kind === 'truncate') {
      image.setSize(p.size);
      continue;
    }
    for (const [from, to] of kept.get(p) ?? [])
      image.write(from, p.data.subarray(from - p.offset, to - p.offset));
  }
  return image.bytes();
}

/** A file image that holds only the pages written to it; everything else reads as zeros. */
class SparseImage {
  #pages = new Map<number, Buffer>();
  #length = 0;

  write(offset: number, data: Buffer): void {
    for (let at = 0; at < data.length; ) {
      const page = Math.floor((offset + at) / PAGE_BYTES);
      const inPage = (offset + at) % PAGE_BYTES;
      const n = Math.min(PAGE_BYTES - inPage, data.length - at);
      let buf = this.#pages.get(page);
      if (buf === undefined) this.#pages.set(page, (buf = Buffer.alloc(PAGE_BYTES)));
      data.copy(buf, inPage, at, at + n);
      at += n;
    }
    this.#length = Math.max(this.#length, offset + data.length);
  }

  setSize(size: number): void {
    if (size < this.#length) {
      for (const page of this.#pages.keys()) if (page * PAGE_BYTES >= size) this.#pages.delete(page);
      // Bytes past the new end must read as zeros if the file grows again.
      this.#pages.get(Math.floor(size / PAGE_BYTES))?.fill(0, size % PAGE_BYTES);
    }
    this.#length = size;
  }

  toFlat(): FlatImage {
    const image = new FlatImage(this.#length);
    for (const [page, buf] of this.#pages) image.place(page * PAGE_BYTES, buf);
    return image;
  }
}

/** A growable file image; bytes past its length are kept zero. */
class FlatImage {
  #buf: Buffer;
  #length: number;

  constructor(length: number) {
    // Buffer.alloc of a large size is calloc'd: untouched pages of a sparse file cost no memory.
    this.#buf = Buffer.alloc(length);
    this.#length = length;
  }

  /** Copies `data` at `offset`, clipped to the current length (for whole pages of a shorter image). */
  place(offset: number, data: Buffer): void {
    data.copy(this.#buf, offset, 0, Math.max(0, Math.min(data.length, this.#length - offset)));
  }

  write(offset: number, data: Buffer): void {
    const end = offset + data.length;
    this.#reserve(end);
    data.copy(this.#buf, offset);
    this.#length = Math.max(this.#length, end);
  }

  setSize(size: number): void {
    if (size < this.#length) this.#buf.fill(0, size, this.#length);
    else this.#reserve(size);
    this.#length = size;
  }

  bytes(): Buffer {
    return this.#buf.subarray(0, this.#length);
  }

  #reserve(bytes: number): void {
    if (bytes <= this.#buf.length) return;
    const grown = Buffer.alloc(Math.max(bytes, this.#buf.length * 2));
    this.#buf.copy(grown, 0, 0, this.#length);
    this.#buf = grown;
  }
}

const ZERO_PAGE = Buffer.alloc(PAGE_BYTES);

/**
 * Writes a crash state under `targetDir` (made if missing). Runs of all-zero pages are left as holes,
 * so a map file ftruncated to hundreds of MB costs only its written pages on disk. Hard links are
 * not kept: each name of a linked file is written as a file of its own, with the same content.
 */
export function writeCrashState(state: CrashState, targetDir: string): void {
  mkdirSync(targetDir, { recursive: true });
  for (const dir of [...state.dirs].sort()) mkdirSync(join(targetDir, dir), { recursive: true });
  for (const [path, content] of state.files) {
    const full = join(targetDir, path);
    mkdirSync(dirname(full), { recursive: true });
    const fd = openSync(full, 'w');
    try {
      writeSparse(fd, content);
      ftruncateSync(fd, content.length);
    } finally {
      closeSync(fd);
    }
  }
}

function writeSparse(fd: number, content: Buffer): void {
  let runStart = -1;
  for (let at = 0; at < content.length; at += PAGE_BYTES) {
    const page = content.subarray(at, at + PAGE_BYTES);
    const zero = page.equals(ZERO_PAGE.subarray(0, page.length));
    if (!zero && runStart < 0) runStart = at;
    if (zero && runStart >= 0) {
      writeAll(fd, content.subarray(runStart, at), runStart);
      runStart = -1;
    }
  }
  if (runStart >= 0) writeAll(fd, content.subarray(runStart), runStart);
}

function writeAll(fd: number, data: Buffer, position: number): void {
  for (let done = 0; done < data.length; )
    done += writeSync(fd, data, done, data.length - done, position + done);
}

function parentOf(path: string): string {
  const slash = path.lastIndexOf('/');
  return slash < 0 ? '' : path.slice(0, slash);
}
