// The request handlers of the crash recorder (./fuse-recorder.ts): each FUSE request done on the
// backing directory with fs.*Sync, and each change to file data or the namespace handed to
// `record` before the reply goes back to the kernel (so an fsync is in the log before the
// application's fsync(2) returns).
//
// Node ids: one per file, stable while the kernel holds it (LOOKUP, CREATE, MKDIR and LINK replies
// count up, FORGET counts down; at zero the id is dropped and a later lookup gets a fresh one — ids
// are never reused). A file has one path, or several after LINK: the new name gets the linked
// node's id, and a lookup of a name of a file with several links finds the node of its other names
// (by inode), so the kernel never holds two inodes for one file. Its data are recorded under its
// first name; the op log's link op makes every name the same file in the crash states. Renames
// move ids with their paths; an unlinked or renamed-over name leaves its node's other names; a node
// with no name left keeps its id, and is reached only through its open handles. Writes to such a
// file are not recorded: its data cannot be in any crash state.
//
// The backing directory is scratch space, not the disk being modelled: FSYNC is recorded, not
// passed on (the recording is the model of durability; fsyncing the scratch copy would only slow
// runs down).

import * as fs from 'node:fs';
import { constants } from 'node:os';
import * as wire from './fuse-wire.js';
import { InSize, Opcode, SetattrValid } from './fuse-wire.js';
import type { Op } from './op-log.js';

export interface Reply {
  /** 0 or a negative errno. */
  error: number;
  payload?: Buffer;
}

/** What the recorder asks of the kernel at INIT: see ./fuse-recorder.ts's header for why. */
const INIT_WANTED = wire.InitFlag.ASYNC_READ | wire.InitFlag.BIG_WRITES | wire.InitFlag.MAX_PAGES;
const MAX_BACKGROUND = 16;
const CONGESTION_THRESHOLD = 12;
const PAGE_BYTES = 4096;
/** Cache lifetimes: every change goes through this mount, so the kernel's caches stay right. */
const VALIDITY: wire.Validity = { entrySeconds: 1, attrSeconds: 1 };
const NAME_BYTES_MAX = 255;
const SEEK_DATA = 3;
const SEEK_HOLE = 4;
/** Backing fds get only the access mode: O_APPEND would make pwrite append, O_DIRECT needs aligned buffers. */
const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC } = fs.constants;
/** Not in Node's fs.constants: the access-mode bits of open(2)'s flags. */
const O_ACCMODE = 3;

class FuseError extends Error {
  constructor(
    readonly errno: number,
    message: string,
  ) {
    super(message);
  }
}

/** A request shorter than its argument struct, or otherwise unreadable: EIO and a line on stderr. */
class BadRequest extends Error {}

interface Node {
  /** Its names on the mount, the one its data are recorded under first; empty once all are removed. */
  paths: string[];
  /** Its backing inode: the node of a hard-linked file is found by it from any of its names. */
  ino: bigint;
  lookups: number;
}

type Handle =
  | { kind: 'file'; fd: number; nodeid: number }
  | { kind: 'dir'; nodeid: number; entries: wire.DirentIn[] };

type Handler = (h: wire.InHeader, arg: Buffer, atNs: bigint) => Reply | undefined;

const ok = (payload?: Buffer): Reply => ({ error: 0, payload });

export class FusePassthrough {
  readonly #backing: string;
  readonly #record: (op: Op) => void;
  readonly #nodes = new Map<number, Node>([[wire.FUSE_ROOT_ID, { paths: [''], ino: 0n, lookups: 1 }]]);
  readonly #byPath = new Map<string, number>([['', wire.FUSE_ROOT_ID]]);
  readonly #handles = new Map<number, Handle>();
  #nextNodeId = wire.FUSE_ROOT_ID + 1;
  #nextFh = 1;
  /** The largest WRITE we accept: the max_write we negotiate. */
  readonly #maxWrite: number;
  readonly #handlers: Map<number, Handler>;

  constructor(backing: string, record: (op: Op) => void, maxWrite: number) {
    this.#backing = backing;
    this.#record = record;
    this.#maxWrite = maxWrite;
    this.#handlers = this.#handlerTable();
  }

  /** The reply to one request; undefined for those that get none (FORGET, INTERRUPT). */
  handle(h: wire.InHeader, arg: Buffer, atNs: bigint): Reply | undefined {
    const handler = this.#handlers.get(h.opcode);
    if (handler === undefined) return { error: -constants.errno.ENOSYS };
    try {
      return handler(h, arg, atNs);
    } catch (error) {
      return { error: -this.#errnoOf(error, h) };
    }
  }

  #errnoOf(error: unknown, h: wire.InHeader): number {
    if (error instanceof FuseError) return error.errno;
    const code = (error as NodeJS.ErrnoException).code;
    const errno = code === undefined ? undefined : (constants.errno as Record<string, number>)[code];
    if (errno !== undefined) return errno;
    const what = error instanceof Error ? error.message : String(error);
    process.stderr.write(`fuse-recorder: ${wire.opcodeName(h.opcode)} (unique ${h.unique}): ${what}\n`);
    return constants.errno.EIO;
  }

  #handlerTable(): Map<number, Handler> {
    const none = () => undefined;
    return new Map<number, Handler>([
      [Opcode.INIT, (_h, a) => this.#init(a)],
      [Opcode.DESTROY, () => ok()],
      [Opcode.INTERRUPT, none], // every request is answered before the next is read
      [Opcode.FORGET, (h, a) => this.#forget(h.nodeid, wire.forgetIn(need(a, InSize.FORGET)).nlookup)],
      [Opcode.BATCH_FORGET, (_h, a) => this.#batchForget(a)],
      [Opcode.LOOKUP, (h, a) => this.#lookup(h, a)],
      [Opcode.GETATTR, (h, a) => this.#getattr(h, a)],
      [Opcode.SETATTR, (h, a, t) => this.#setattr(h, a, t)],
      [Opcode.OPEN, (h, a) => this.#open(h, a)],
      [Opcode.CREATE, (h, a, t) => this.#create(h, a, t)],
      [Opcode.READ, (_h, a) => this.#read(a)],
      [Opcode.WRITE, (_h, a, t) => this.#write(a, t)],
      [Opcode.FLUSH, (_h, a) => this.#flush(a)],
      [Opcode.RELEASE, (_h, a) => this.#release(a)],
      [Opcode.FSYNC, (h, a, t) => this.#fsync(h, a, t, false)],
      [Opcode.OPENDIR, (h) => this.#opendir(h)],
      [Opcode.READDIR, (_h, a) => this.#readdir(a)],
      [Opcode.RELEASEDIR, (_h, a) => this.#releasedir(a)],
      [Opcode.FSYNCDIR, (h, a, t) => this.#fsync(h, a, t, true)],
      [Opcode.MKDIR, (h, a, t) => this.#mkdir(h, a, t)],
      [Opcode.UNLINK, (h, a, t) => this.#remove(h, a, t, 'unlink')],
      [Opcode.RMDIR, (h, a, t) => this.#remove(h, a, t, 'rmdir')],
      [Opcode.RENAME, (h, a, t) => this.#rename(h, a, t, false)],
      [Opcode.RENAME2, (h, a, t) => this.#rename(h, a, t, true)],
      [Opcode.LINK, (h, a, t) => this.#link(h, a, t)],
      [Opcode.STATFS, () => this.#statfs()],
      [Opcode.ACCESS, (h, a) => this.#access(h, a)],
      [Opcode.FALLOCATE, (_h, a, t) => this.#fallocate(a, t)],
      [Opcode.LSEEK, (_h, a) => this.#lseek(a)],
    ]);
  }

  #init(a: Buffer): Reply {
    const init = wire.readInitIn(need(a, wire.INIT_IN_BYTES_MIN));
    if (init.major !== wire.FUSE_KERNEL_VERSION || init.minor < wire.FUSE_MINOR_VERSION_MIN) {
      throw new FuseError(constants.errno.EPROTO, `FUSE ${init.major}.${init.minor} is not supported`);
    }
    const payload = wire.encodeInitOut({
      major: wire.FUSE_KERNEL_VERSION,
      minor: Math.min(init.minor, wire.FUSE_KERNEL_MINOR_VERSION),
      maxReadahead: init.maxReadahead,
      flags: init.flags & INIT_WANTED,
      maxBackground: MAX_BACKGROUND,
      congestionThreshold: CONGESTION_THRESHOLD,
      maxWrite: this.#maxWrite,
      timeGranNs: 1,
      maxPages: this.#maxWrite / PAGE_BYTES,
    });
    return ok(payload);
  }

  // --- node ids and handles

  #path(nodeid: number): string {
    const node = this.#nodes.get(nodeid);
    if (node === undefined) throw new FuseError(constants.errno.ESTALE, `unknown node ${nodeid}`);
    const path = node.paths[0];
    if (path === undefined) throw new FuseError(constants.errno.ENOENT, `node ${nodeid} was removed`);
    return path;
  }

  /** The backing path of a node. */
  #full(nodeid: number): string {
    return this.#abs(this.#path(nodeid));
  }

  #child(parent: number, name: string): string {
    if (
      name === '' ||
      name === '.' ||
      name === '..' ||
      name.includes('/') ||
      Buffer.byteLength(name) > NAME_BYTES_MAX
    ) {
      throw new FuseError(constants.errno.EINVAL, `bad name ${JSON.stringify(name)}`);
    }
    const dir = this.#path(parent);
    return dir === '' ? name : `${dir}/${name}`;
  }

  #abs(rel: string): string {
    return rel === '' ? this.#backing : `${this.#backing}/${rel}`;
  }

  /** The node id for `path` (whose lstat is `st`), counted as one more kernel reference. */
  #ref(path: string, st: fs.BigIntStats): number {
    let id = this.#byPath.get(path) ?? this.#linkedNode(st);
    if (id === undefined) {
      id = this.#nextNodeId++;
      this.#nodes.set(id, { paths: [], ino: st.ino, lookups: 0 });
    }
    const node = this.#nodes.get(id)!;
    if (this.#byPath.get(path) !== id) {
      this.#byPath.set(path, id);
      node.paths.push(path);
    }
    node.lookups++;
    return id;
  }

  /**
   * The live node of a file with several links that one of its other names already has, if any.
   * A candidate's first name must still be that inode (so a reused inode number is not mistaken).
   */
  #linkedNode(st: fs.BigIntStats): number | undefined {
    if (st.nlink < 2n || st.isDirectory()) return undefined;
    for (const [id, node] of this.#nodes) {
      if (node.ino !== st.ino || node.paths.length === 0) continue;
      const current = fs.lstatSync(this.#abs(node.paths[0]), { bigint: true, throwIfNoEntry: false });
      if (current?.ino === st.ino && current.dev === st.dev) return id;
    }
    return undefined;
  }

  #forget(nodeid: number, count: number): undefined {
    const node = this.#nodes.get(nodeid);
    if (node === undefined || nodeid === wire.FUSE_ROOT_ID) return undefined;
    node.lookups -= count;
    if (node.lookups > 0) return undefined;
    this.#nodes.delete(nodeid);
    for (const path of node.paths) if (this.#byPath.get(path) === nodeid) this.#byPath.delete(path);
    return undefined;
  }

  #batchForget(a: Buffer): undefined {
    const count = wire.batchForgetCount(need(a, InSize.BATCH_FORGET));
    need(a, InSize.BATCH_FORGET + count * InSize.FORGET_ONE);
    for (let i = 0; i < count; i++) {
      const one = wire.forgetOne(a, i);
      this.#forget(one.nodeid, one.nlookup);
    }
    return undefined;
  }

  /** `path` no longer names its node (unlinked, or renamed over); the node keeps its other names. */
  #detach(path: string): void {
    const id = this.#byPath.get(path);
    if (id === undefined) return;
    this.#byPath.delete(path);
    const node = this.#nodes.get(id);
    if (node !== undefined) node.paths = node.paths.filter((p) => p !== path);
  }

  #fileHandle(fh: number): { fd: number; nodeid: number } {
    const handle = this.#handles.get(fh);
    if (handle?.kind !== 'file') throw new FuseError(constants.errno.EBADF, `no open file ${fh}`);
    return handle;
  }

  /** The path a node's data are recorded under (its first name); null for an unlinked file. */
  #recordPath(nodeid: number): string | null {
    return this.#nodes.get(nodeid)?.paths[0] ?? null;
  }

  #newHandle(handle: Handle): number {
    const fh = this.#nextFh++;
    this.#handles.set(fh, handle);
    return fh;
  }

  /** An entry_out for `path`, counting one more kernel reference to its node. */
  #entry(path: string): { nodeid: number; out: Buffer } {
    const st = fs.lstatSync(this.#abs(path), { bigint: true });
    const nodeid = this.#ref(path, st);
    return { nodeid, out: wire.encodeEntryOut(nodeid, st, VALIDITY) };
  }

  // --- attributes

  #lookup(h: wire.InHeader, a: Buffer): Reply {
    return ok(this.#entry(this.#child(h.nodeid, name(a, 0))).out);
  }

  #getattr(h: wire.InHeader, a: Buffer): Reply {
    const g = a.length >= InSize.GETATTR ? wire.getattrIn(a) : { flags: 0, fh: 0 };
    const handle = g.flags & wire.FUSE_GETATTR_FH ? this.#handles.get(g.fh) : undefined;
    const st = bigStatOf(handle?.kind === 'file' ? handle.fd : this.#full(h.nodeid));
    return ok(wire.encodeAttrOut(st, VALIDITY));
  }

  #setattr(h: wire.InHeader, a: Buffer, atNs: bigint): Reply {
    const s = wire.readSetattrIn(need(a, InSize.SETATTR));
    const handle = s.valid & SetattrValid.FH ? this.#fileHandle(s.fh) : undefined;
    const path = handle === undefined ? this.#path(h.nodeid) : this.#recordPath(handle.nodeid);
    const target = handle?.fd ?? this.#full(h.nodeid);
    if (s.valid & SetattrValid.MODE) chmod(target, s.mode & 0o7777);
    if (s.valid & (SetattrValid.UID | SetattrValid.GID)) {
      const st = statOf(target);
      chown(target, s.valid & SetattrValid.UID ? s.uid : st.uid, s.valid & SetattrValid.GID ? s.gid : st.gid);
    }
    if (s.valid & SetattrValid.SIZE) {
      if (typeof target === 'number') fs.ftruncateSync(target, s.size);
      else fs.truncateSync(target, s.size);
      if (path !== null) this.#record({ kind: 'truncate', atNs, path, size: s.size });
    }
    const times = SetattrValid.ATIME | SetattrValid.MTIME | SetattrValid.ATIME_NOW | SetattrValid.MTIME_NOW;
    if (s.valid & times) setTimes(target, s, statOf(target));
    return ok(wire.encodeAttrOut(bigStatOf(target), VALIDITY));
  }

  // --- files

  #open(h: wire.InHeader, a: Buffer): Reply {
    const { flags } = wire.openIn(need(a, InSize.OPEN));
    const fd = openBacking(this.#full(h.nodeid), flags, 0);
    const fh = this.#newHandle({ kind: 'file', fd, nodeid: h.nodeid });
    return ok(wire.encodeOpenOut(fh, wire.FOPEN_KEEP_CACHE));
  }

  #create(h: wire.InHeader, a: Buffer, atNs: bigint): Reply {
    const c = wire.createIn(need(a, InSize.CREATE));
    const path = this.#child(h.nodeid, name(a, InSize.CREATE));
    const existed = fs.existsSync(this.#abs(path));
    const fd = openBacking(this.#abs(path), c.flags, c.mode & 0o7777);
    if (!existed) this.#record({ kind: 'create', atNs, path });
    else if (c.flags & O_TRUNC) this.#record({ kind: 'truncate', atNs, path, size: 0 });
    const entry = this.#entry(path);
    const fh = this.#newHandle({ kind: 'file', fd, nodeid: entry.nodeid });
    return ok(Buffer.concat([entry.out, wire.encodeOpenOut(fh, wire.FOPEN_KEEP_CACHE)]));
  }

  #read(a: Buffer): Reply {
    const r = wire.readReadWriteIn(need(a, InSize.READ));
    const { fd } = this.#fileHandle(r.fh);
    // READs are bounded by max_pages, which we negotiate as max_write's pages.
    const data = Buffer.allocUnsafe(Math.min(r.size, this.#maxWrite));
    let got = 0;
    while (got < data.length) {
      const n = fs.readSync(fd, data, got, data.length - got, r.offset + got);
      if (n === 0) break;
      got += n;
    }
    return ok(data.subarray(0, got));
  }

  #write(a: Buffer, atNs: bigint): Reply {
    const w = wire.readReadWriteIn(need(a, InSize.WRITE));
    const data = a.subarray(InSize.WRITE, InSize.WRITE + w.size);
    if (data.length !== w.size || w.size > this.#maxWrite)
      throw new BadRequest(`WRITE of ${w.size} with ${data.length} bytes`);
    const handle = this.#fileHandle(w.fh);
    for (let done = 0; done < data.length; )
      done += fs.writeSync(handle.fd, data, done, data.length - done, w.offset + done);
    const path = this.#recordPath(handle.nodeid);
    if (path !== null) this.#record({ kind: 'write', atNs, path, offset: w.offset, data });
    return ok(wire.encodeWriteOut(data.length));
  }

  /** Nothing to do: without a writeback cache the kernel has sent every dirty page before FLUSH. */
  #flush(a: Buffer): Reply {
    this.#fileHandle(wire.fhOf(need(a, InSize.FLUSH)));
    return ok();
  }

  #release(a: Buffer): Reply {
    const fh = wire.fhOf(need(a, InSize.RELEASE));
    const handle = this.#fileHandle(fh);
    this.#handles.delete(fh);
    fs.closeSync(handle.fd);
    return ok();
  }

  #fsync(h: wire.InHeader, a: Buffer, atNs: bigint, dir: boolean): Reply {
    const flags = wire.fsyncFlagsOf(need(a, InSize.FSYNC));
    const path = this.#recordPath(h.nodeid);
    const datasync = (flags & wire.FUSE_FSYNC_FDATASYNC) !== 0;
    if (path !== null) this.#record({ kind: 'fsync', atNs, path, datasync, dir });
    return ok();
  }

  #fallocate(a: Buffer, atNs: bigint): Reply {
    const f = wire.fallocateIn(need(a, InSize.FALLOCATE));
    if (f.mode !== 0) throw new FuseError(constants.errno.EOPNOTSUPP, 'fallocate mode');
    const handle = this.#fileHandle(f.fh);
    const end = f.offset + f.length;
    // Mode 0 allocates and extends; the scratch copy only needs the size (a hole reads as zeros).
    if (end > fs.fstatSync(handle.fd).size) {
      fs.ftruncateSync(handle.fd, end);
      const path = this.#recordPath(handle.nodeid);
      if (path !== null) this.#record({ kind: 'truncate', atNs, path, size: end });
    }
    return ok();
  }

  /** SEEK_DATA / SEEK_HOLE, answered as for a file without holes. */
  #lseek(a: Buffer): Reply {
    const l = wire.lseekIn(need(a, InSize.LSEEK));
    const size = fs.fstatSync(this.#fileHandle(l.fh).fd).size;
    if (l.whence !== SEEK_DATA && l.whence !== SEEK_HOLE)
      throw new FuseError(constants.errno.EINVAL, 'whence');
    if (l.offset >= size) throw new FuseError(constants.errno.ENXIO, 'past end');
    return ok(wire.encodeLseekOut(l.whence === SEEK_DATA ? l.offset : size));
  }

  // --- directories

  #opendir(h: wire.InHeader): Reply {
    const dir = this.#full(h.nodeid);
    const names = ['.', '..', ...fs.readdirSync(dir)];
    const entries: wire.DirentIn[] = [];
    for (const n of names) {
      const st = fs.lstatSync(`${dir}/${n}`, { bigint: true, throwIfNoEntry: false });
      if (st !== undefined)
        entries.push({ ino: st.ino, off: entries.length + 1, type: Number(st.mode) >> 12, name: n });
    }
    return ok(wire.encodeOpenOut(this.#newHandle({ kind: 'dir', nodeid: h.nodeid, entries }), 0));
  }

  #readdir(a: Buffer): Reply {
    const r = wire.readReadWriteIn(need(a, InSize.READ));
    const handle = this.#handles.get(r.fh);
    if (handle?.kind !== 'dir') throw new FuseError(constants.errno.EBADF, `no open directory ${r.fh}`);
    const out = Buffer.alloc(r.size);
    let used = 0;
    for (let i = r.offset; i < handle.entries.length; i++) {
      const n = wire.writeDirent(out, used, out.length, handle.entries[i]);
      if (n === 0) break;
      used += n;
    }
    return ok(out.subarray(0, used));
  }

  #releasedir(a: Buffer): Reply {
    this.#handles.delete(wire.fhOf(need(a, InSize.RELEASE)));
    return ok();
  }

  #mkdir(h: wire.InHeader, a: Buffer, atNs: bigint): Reply {
    const m = wire.mkdirIn(need(a, InSize.MKDIR));
    const path = this.#child(h.nodeid, name(a, InSize.MKDIR));
    fs.mkdirSync(this.#abs(path), { mode: m.mode & 0o7777 });
    this.#record({ kind: 'mkdir', atNs, path });
    return ok(this.#entry(path).out);
  }

  #remove(h: wire.InHeader, a: Buffer, atNs: bigint, kind: 'unlink' | 'rmdir'): Reply {
    const path = this.#child(h.nodeid, name(a, 0));
    if (kind === 'unlink') fs.unlinkSync(this.#abs(path));
    else fs.rmdirSync(this.#abs(path));
    this.#detach(path);
    this.#record({ kind, atNs, path });
    return ok();
  }

  /** RENAME, or RENAME2 (fuse_rename2_in: newdir, then flags). */
  #rename(h: wire.InHeader, a: Buffer, atNs: bigint, two: boolean): Reply {
    const argBytes = two ? InSize.RENAME2 : InSize.RENAME;
    const { newdir, flags } = two
      ? wire.rename2In(need(a, argBytes))
      : { ...wire.renameIn(need(a, argBytes)), flags: 0 };
    // RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT are not modelled by the crash states.
    if (flags !== 0) throw new FuseError(constants.errno.EINVAL, `rename flags ${flags}`);
    const [oldName, newName] = names(a, argBytes, 2);
    const from = this.#child(h.nodeid, oldName);
    const to = this.#child(newdir, newName);
    fs.renameSync(this.#abs(from), this.#abs(to));
    // rename(2) between two names of one file does nothing: both names stay.
    const sameFile =
      from === to || (this.#byPath.has(from) && this.#byPath.get(from) === this.#byPath.get(to));
    if (!sameFile) this.#moveNodes(from, to);
    this.#record({ kind: 'rename', atNs, from, to });
    return ok();
  }

  /** Node ids follow a rename, a directory's descendants with it. */
  #moveNodes(from: string, to: string): void {
    this.#detach(to);
    const moved = [...this.#byPath].filter(([p]) => p === from || p.startsWith(`${from}/`));
    for (const [p] of moved) this.#byPath.delete(p);
    for (const [p, id] of moved) {
      const path = to + p.slice(from.length);
      this.#byPath.set(path, id);
      const node = this.#nodes.get(id);
      if (node !== undefined) node.paths = node.paths.map((q) => (q === p ? path : q));
    }
  }

  /**
   * LINK (fuse_link_in, then the new name in the directory h.nodeid): a new name for the node
   * `oldnodeid`, which the reply's entry names again (one more kernel reference to it).
   */
  #link(h: wire.InHeader, a: Buffer, atNs: bigint): Reply {
    const { oldnodeid } = wire.linkIn(need(a, InSize.LINK));
    const from = this.#path(oldnodeid);
    const to = this.#child(h.nodeid, name(a, InSize.LINK));
    fs.linkSync(this.#abs(from), this.#abs(to));
    this.#record({ kind: 'link', atNs, from, to });
    const node = this.#nodes.get(oldnodeid)!;
    this.#detach(to); // a stale id for the name (link(2) needs it not to exist)
    this.#byPath.set(to, oldnodeid);
    node.paths.push(to);
    node.lookups++;
    const st = fs.lstatSync(this.#abs(to), { bigint: true });
    return ok(wire.encodeEntryOut(oldnodeid, st, VALIDITY));
  }

  #access(h: wire.InHeader, a: Buffer): Reply {
    fs.accessSync(this.#full(h.nodeid), wire.accessIn(need(a, InSize.ACCESS)).mask);
    return ok();
  }

  #statfs(): Reply {
    const s = fs.statfsSync(this.#backing);
    return ok(wire.encodeStatfsOut({ ...s, namelen: NAME_BYTES_MAX }));
  }
}

/** `arg`, after checking it holds at least `bytes`. */
function need(arg: Buffer, bytes: number): Buffer {
  if (arg.length < bytes) throw new BadRequest(`argument of ${arg.length} bytes, need ${bytes}`);
  return arg;
}

function name(a: Buffer, at: number): string {
  return names(a, at, 1)[0];
}

function names(a: Buffer, at: number, count: number): string[] {
  try {
    return wire.readNames(a, at, count);
  } catch (error) {
    throw new BadRequest((error as Error).message);
  }
}

/**
 * Opens a backing file. Only the access mode (and, creating, O_CREAT/O_EXCL/O_TRUNC) is kept; a
 * write-only open is made read-write, since the kernel may read through any handle (page-cache
 * fills for an mmap) and we run as root.
 */
function openBacking(path: string, flags: number, mode: number): number {
  const create = flags & (O_CREAT | O_EXCL | O_TRUNC);
  const access = flags & O_ACCMODE;
  if (access === O_WRONLY) {
    try {
      return fs.openSync(path, O_RDWR | create, mode);
    } catch {
      // fall through to the access asked for
    }
  }
  return fs.openSync(path, (access === O_RDWR || access === O_WRONLY ? access : O_RDONLY) | create, mode);
}

/** A path is stat'ed without following a symlink (lstat), an fd with fstat. */
function statOf(target: string | number): fs.Stats {
  return typeof target === 'number' ? fs.fstatSync(target) : fs.lstatSync(target);
}

function bigStatOf(target: string | number): fs.BigIntStats {
  return typeof target === 'number'
    ? fs.fstatSync(target, { bigint: true })
    : fs.lstatSync(target, { bigint: true });
}

function chmod(target: string | number, mode: number): void {
  if (typeof target === 'number') fs.fchmodSync(target, mode);
  else fs.chmodSync(target, mode);
}

function chown(target: string | number, uid: number, gid: number): void {
  if (typeof target === 'number') fs.fchownSync(target, uid, gid);
  else fs.lchownSync(target, uid, gid);
}

function setTimes(target: string | number, s: wire.SetattrIn, st: fs.Stats): void {
  const now = Date.now() / 1000;
  const time = (set: number, setNow: number, sec: bigint, nsec: number, current: number) =>
    s.valid & setNow ? now : s.valid & set ? Number(sec) + nsec / 1e9 : current / 1000;
  const atime = time(SetattrValid.ATIME, SetattrValid.ATIME_NOW, s.atime, s.atimensec, st.atimeMs);
  const mtime = time(SetattrValid.MTIME, SetattrValid.MTIME_NOW, s.mtime, s.mtimensec, st.mtimeMs);
  if (typeof target === 'number') fs.futimesSync(target, atime, mtime);
  else fs.utimesSync(target, atime, mtime);
}
