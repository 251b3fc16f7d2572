// The FUSE kernel protocol's byte layouts, as the crash recorder (./fuse-recorder.ts) speaks it over
// /dev/fuse: every request is one read of the device (an in header, then the opcode's argument
// struct, then names or data), every reply one write (an out header, then the reply struct).
//
// Taken from the Linux uapi header include/uapi/linux/fuse.h, protocol 7.45 (Linux 6.18). All
// fields are little-endian on the machines this runs on (x86-64, arm64); every struct is padded to
// 8 bytes. Offsets are named here once; nothing else in test/crash spells out a byte position.
//
//   fuse_in_header (40)                     fuse_out_header (16)
//   0   4  len       u32 (whole request)    0  4  len     u32 (whole reply)
//   4   4  opcode    u32                    4  4  error   i32 (0 or a negative errno)
//   8   8  unique    u64                    8  8  unique  u64 (echoes the request's)
//   16  8  nodeid    u64
//   24  4  uid  28 4 gid  32 4 pid
//   36  2  total_extlen u16 (8-byte units of extensions at the end; none unless negotiated)
//   38  2  padding
//
// Requests that name a directory entry carry the name NUL-terminated after their struct (RENAME:
// old name, NUL, new name, NUL; LINK: fuse_link_in, then the new name, its directory being the
// header's nodeid). WRITE's data follows fuse_write_in. Replies that carry data (READ,
// READDIR) put it right after the out header.

import type { BigIntStats } from 'node:fs';

export const FUSE_KERNEL_VERSION = 7;
/** The newest minor version whose layouts this file knows; the kernel and we settle on the lesser. */
export const FUSE_KERNEL_MINOR_VERSION = 45;
/** Structs below changed size up to 7.23 (init_out) and 7.9 (write_in, attr); older kernels are refused. */
export const FUSE_MINOR_VERSION_MIN = 31;
export const FUSE_ROOT_ID = 1;

export const Opcode = {
  LOOKUP: 1,
  FORGET: 2,
  GETATTR: 3,
  SETATTR: 4,
  READLINK: 5,
  SYMLINK: 6,
  MKNOD: 8,
  MKDIR: 9,
  UNLINK: 10,
  RMDIR: 11,
  RENAME: 12,
  LINK: 13,
  OPEN: 14,
  READ: 15,
  WRITE: 16,
  STATFS: 17,
  RELEASE: 18,
  FSYNC: 20,
  SETXATTR: 21,
  GETXATTR: 22,
  LISTXATTR: 23,
  REMOVEXATTR: 24,
  FLUSH: 25,
  INIT: 26,
  OPENDIR: 27,
  READDIR: 28,
  RELEASEDIR: 29,
  FSYNCDIR: 30,
  GETLK: 31,
  SETLK: 32,
  SETLKW: 33,
  ACCESS: 34,
  CREATE: 35,
  INTERRUPT: 36,
  BMAP: 37,
  DESTROY: 38,
  IOCTL: 39,
  POLL: 40,
  NOTIFY_REPLY: 41,
  BATCH_FORGET: 42,
  FALLOCATE: 43,
  READDIRPLUS: 44,
  RENAME2: 45,
  LSEEK: 46,
  COPY_FILE_RANGE: 47,
  SETUPMAPPING: 48,
  REMOVEMAPPING: 49,
  SYNCFS: 50,
  TMPFILE: 51,
  STATX: 52,
  COPY_FILE_RANGE_64: 53,
} as const;

/** Opcode number → name, for log lines. */
export function opcodeName(opcode: number): string {
  for (const [name, value] of Object.entries(Opcode)) if (value === opcode) return name;
  return `opcode ${opcode}`;
}

/** INIT flags (fuse_init_in.flags / fuse_init_out.flags); only those the recorder reads or sets. */
export const InitFlag = {
  ASYNC_READ: 1 << 0,
  POSIX_LOCKS: 1 << 1,
  ATOMIC_O_TRUNC: 1 << 3,
  BIG_WRITES: 1 << 5,
  DONT_MASK: 1 << 6,
  FLOCK_LOCKS: 1 << 10,
  WRITEBACK_CACHE: 1 << 16,
  MAX_PAGES: 1 << 22,
} as const;

/** fuse_setattr_in.valid bits. */
export const SetattrValid = {
  MODE: 1 << 0,
  UID: 1 << 1,
  GID: 1 << 2,
  SIZE: 1 << 3,
  ATIME: 1 << 4,
  MTIME: 1 << 5,
  FH: 1 << 6,
  ATIME_NOW: 1 << 7,
  MTIME_NOW: 1 << 8,
  LOCKOWNER: 1 << 9,
  CTIME: 1 << 10,
  KILL_SUIDGID: 1 << 11,
} as const;

/** fuse_open_out.open_flags. The recorder sets KEEP_CACHE and never DIRECT_IO (shared mmap needs the page cache). */
export const FOPEN_DIRECT_IO = 1 << 0;
export const FOPEN_KEEP_CACHE = 1 << 1;
/** fuse_getattr_in.getattr_flags: `fh` is valid. */
export const FUSE_GETATTR_FH = 1 << 0;
/** fuse_fsync_in.fsync_flags: fdatasync, not fsync (bit 0, value 1). */
export const FUSE_FSYNC_FDATASYNC = 1 << 0;
/** fuse_write_in.write_flags: a write-back of page-cache pages (mmap), the handle guessed by the kernel. */
export const FUSE_WRITE_CACHE = 1 << 0;

export const IN_HEADER_BYTES = 40;
export const OUT_HEADER_BYTES = 16;
export const ATTR_BYTES = 88;
export const ENTRY_OUT_BYTES = 40 + ATTR_BYTES;
export const ATTR_OUT_BYTES = 16 + ATTR_BYTES;
export const OPEN_OUT_BYTES = 16;
export const INIT_IN_BYTES = 64;
/** Kernels before 7.36 send the 16-byte fuse_init_in without flags2 and the spare words. */
export const INIT_IN_BYTES_MIN = 16;
export const INIT_OUT_BYTES = 64;
export const WRITE_OUT_BYTES = 8;
export const STATFS_OUT_BYTES = 80;
export const LSEEK_OUT_BYTES = 8;
export const DIRENT_HEADER_BYTES = 24;

/** Argument struct sizes: a request shorter than header + struct is malformed. */
export const InSize = {
  FORGET: 8,
  BATCH_FORGET: 8,
  FORGET_ONE: 16,
  GETATTR: 16,
  SETATTR: 88,
  OPEN: 8,
  CREATE: 16,
  MKDIR: 8,
  RENAME: 8,
  RENAME2: 16,
  LINK: 8,
  READ: 40,
  WRITE: 40,
  RELEASE: 24,
  FLUSH: 24,
  FSYNC: 16,
  ACCESS: 8,
  FALLOCATE: 32,
  LSEEK: 24,
} as const;

export interface InHeader {
  len: number;
  opcode: number;
  unique: bigint;
  nodeid: number;
  uid: number;
  gid: number;
  pid: number;
}

export function readInHeader(b: Buffer): InHeader {
  return {
    len: b.readUInt32LE(0),
    opcode: b.readUInt32LE(4),
    unique: b.readBigUInt64LE(8),
    nodeid: u64(b, 16),
    uid: b.readUInt32LE(24),
    gid: b.readUInt32LE(28),
    pid: b.readUInt32LE(32),
  };
}

/** A u64 field as a number; values past 2^53 (never a real offset or node id) are a malformed request. */
export function u64(b: Buffer, at: number): number {
  const v = b.readBigUInt64LE(at);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`u64 at ${at} out of range: ${v}`);
  return Number(v);
}

/** A reply: out header then `payload`; error replies are the bare header. */
export function encodeReply(unique: bigint, error: number, payload?: Buffer): Buffer {
  const out = Buffer.alloc(OUT_HEADER_BYTES + (payload?.length ?? 0));
  out.writeUInt32LE(out.length, 0);
  out.writeInt32LE(error, 4);
  out.writeBigUInt64LE(unique, 8);
  payload?.copy(out, OUT_HEADER_BYTES);
  return out;
}

export interface InitIn {
  major: number;
  minor: number;
  maxReadahead: number;
  flags: number;
}

export function readInitIn(arg: Buffer): InitIn {
  return {
    major: arg.readUInt32LE(0),
    minor: arg.readUInt32LE(4),
    maxReadahead: arg.readUInt32LE(8),
    flags: arg.readUInt32LE(12),
  };
}

export interface InitOut {
  major: number;
  minor: number;
  maxReadahead: number;
  flags: number;
  maxBackground: number;
  congestionThreshold: number;
  maxWrite: number;
  timeGranNs: number;
  maxPages: number;
}

export function encodeInitOut(o: InitOut): Buffer {
  const b = Buffer.alloc(INIT_OUT_BYTES);
  b.writeUInt32LE(o.major, 0);
  b.writeUInt32LE(o.minor, 4);
  b.writeUInt32LE(o.maxReadahead, 8);
  b.writeUInt32LE(o.flags >>> 0, 12);
  b.writeUInt16LE(o.maxBackground, 16);
  b.writeUInt16LE(o.congestionThreshold, 18);
  b.writeUInt32LE(o.maxWrite, 20);
  b.writeUInt32LE(o.timeGranNs, 24);
  b.writeUInt16LE(o.maxPages, 28);
  // 30 map_alignment u16, 32 flags2 u32, 36 max_stack_depth u32, 40 request_timeout u16, 42 unused: all 0.
  return b;
}

/** fuse_attr from an lstat/fstat with bigint times (nanosecond precision). */
export function writeAttr(b: Buffer, at: number, st: BigIntStats): void {
  b.writeBigUInt64LE(st.ino, at);
  b.writeBigUInt64LE(st.size, at + 8);
  b.writeBigUInt64LE(st.blocks, at + 16);
  b.writeBigUInt64LE(st.atimeNs / 1_000_000_000n, at + 24);
  b.writeBigUInt64LE(st.mtimeNs / 1_000_000_000n, at + 32);
  b.writeBigUInt64LE(st.ctimeNs / 1_000_000_000n, at + 40);
  b.writeUInt32LE(Number(st.atimeNs % 1_000_000_000n), at + 48);
  b.writeUInt32LE(Number(st.mtimeNs % 1_000_000_000n), at + 52);
  b.writeUInt32LE(Number(st.ctimeNs % 1_000_000_000n), at + 56);
  b.writeUInt32LE(Number(st.mode), at + 60);
  b.writeUInt32LE(Number(st.nlink), at + 64);
  b.writeUInt32LE(Number(st.uid), at + 68);
  b.writeUInt32LE(Number(st.gid), at + 72);
  b.writeUInt32LE(Number(st.rdev), at + 76);
  b.writeUInt32LE(Number(st.blksize), at + 80);
  b.writeUInt32LE(0, at + 84); // flags: no submount, no DAX
}

export interface Validity {
  entrySeconds: number;
  attrSeconds: number;
}

export function encodeEntryOut(nodeid: number, st: BigIntStats, valid: Validity): Buffer {
  const b = Buffer.alloc(ENTRY_OUT_BYTES);
  b.writeBigUInt64LE(BigInt(nodeid), 0);
  b.writeBigUInt64LE(0n, 8); // generation: node ids are never reused, so 0 keeps nodeid:generation unique
  b.writeBigUInt64LE(BigInt(valid.entrySeconds), 16);
  b.writeBigUInt64LE(BigInt(valid.attrSeconds), 24);
  // 32 entry_valid_nsec, 36 attr_valid_nsec: 0
  writeAttr(b, 40, st);
  return b;
}

export function encodeAttrOut(st: BigIntStats, valid: Validity): Buffer {
  const b = Buffer.alloc(ATTR_OUT_BYTES);
  b.writeBigUInt64LE(BigInt(valid.attrSeconds), 0);
  // 8 attr_valid_nsec, 12 dummy: 0
  writeAttr(b, 16, st);
  return b;
}

export function encodeOpenOut(fh: number, openFlags: number): Buffer {
  const b = Buffer.alloc(OPEN_OUT_BYTES);
  b.writeBigUInt64LE(BigInt(fh), 0);
  b.writeUInt32LE(openFlags, 8);
  // 12 backing_id: 0 (no passthrough: every read and write must reach the recorder)
  return b;
}

export function encodeWriteOut(size: number): Buffer {
  const b = Buffer.alloc(WRITE_OUT_BYTES);
  b.writeUInt32LE(size, 0);
  return b;
}

export function encodeLseekOut(offset: number): Buffer {
  const b = Buffer.alloc(LSEEK_OUT_BYTES);
  b.writeBigUInt64LE(BigInt(offset), 0);
  return b;
}

export interface Statfs {
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  bsize: number;
  namelen: number;
}

/** fuse_statfs_out = fuse_kstatfs; frsize is reported equal to bsize. */
export function encodeStatfsOut(s: Statfs): Buffer {
  const b = Buffer.alloc(STATFS_OUT_BYTES);
  b.writeBigUInt64LE(BigInt(s.blocks), 0);
  b.writeBigUInt64LE(BigInt(s.bfree), 8);
  b.writeBigUInt64LE(BigInt(s.bavail), 16);
  b.writeBigUInt64LE(BigInt(s.files), 24);
  b.writeBigUInt64LE(BigInt(s.ffree), 32);
  b.writeUInt32LE(s.bsize, 40);
  b.writeUInt32LE(s.namelen, 44);
  b.writeUInt32LE(s.bsize, 48);
  // 52 padding, 56 spare[6]: 0
  return b;
}

export interface SetattrIn {
  valid: number;
  fh: number;
  size: number;
  atime: bigint;
  mtime: bigint;
  atimensec: number;
  mtimensec: number;
  mode: number;
  uid: number;
  gid: number;
}

export function readSetattrIn(a: Buffer): SetattrIn {
  return {
    valid: a.readUInt32LE(0),
    fh: u64(a, 8),
    size: u64(a, 16),
    // 24 lock_owner
    atime: a.readBigUInt64LE(32),
    mtime: a.readBigUInt64LE(40),
    // 48 ctime
    atimensec: a.readUInt32LE(56),
    mtimensec: a.readUInt32LE(60),
    // 64 ctimensec
    mode: a.readUInt32LE(68),
    // 72 unused4
    uid: a.readUInt32LE(76),
    gid: a.readUInt32LE(80),
  };
}

/** fuse_read_in and fuse_write_in share a layout (write_flags where read_flags is). */
export interface ReadWriteIn {
  fh: number;
  offset: number;
  size: number;
  ioFlags: number;
  openFlags: number;
}

export function readReadWriteIn(a: Buffer): ReadWriteIn {
  return {
    fh: u64(a, 0),
    offset: u64(a, 8),
    size: a.readUInt32LE(16),
    ioFlags: a.readUInt32LE(20),
    // 24 lock_owner
    openFlags: a.readUInt32LE(32),
  };
}

/** fh at 0 is common to release, flush, fsync, fallocate, lseek and (at 8) getattr. */
export const fhOf = (a: Buffer): number => u64(a, 0);
export const getattrIn = (a: Buffer) => ({ flags: a.readUInt32LE(0), fh: u64(a, 8) });
export const fsyncFlagsOf = (a: Buffer): number => a.readUInt32LE(8);
export const openIn = (a: Buffer) => ({ flags: a.readUInt32LE(0), openFlags: a.readUInt32LE(4) });
export const createIn = (a: Buffer) => ({
  flags: a.readUInt32LE(0),
  mode: a.readUInt32LE(4),
  umask: a.readUInt32LE(8),
});
export const mkdirIn = (a: Buffer) => ({ mode: a.readUInt32LE(0), umask: a.readUInt32LE(4) });
export const renameIn = (a: Buffer) => ({ newdir: u64(a, 0) });
export const rename2In = (a: Buffer) => ({ newdir: u64(a, 0), flags: a.readUInt32LE(8) });
/**
 * fuse_link_in (8): 0 oldnodeid u64, the node getting a new name; the new name follows NUL-terminated
 * (readNames at InSize.LINK), in the directory that is the header's nodeid.
 */
export const linkIn = (a: Buffer) => ({ oldnodeid: u64(a, 0) });
export const accessIn = (a: Buffer) => ({ mask: a.readUInt32LE(0) });
export const fallocateIn = (a: Buffer) => ({
  fh: u64(a, 0),
  offset: u64(a, 8),
  length: u64(a, 16),
  mode: a.readUInt32LE(24),
});
export const lseekIn = (a: Buffer) => ({ fh: u64(a, 0), offset: u64(a, 8), whence: a.readUInt32LE(16) });
export const forgetIn = (a: Buffer) => ({ nlookup: u64(a, 0) });
export const batchForgetCount = (a: Buffer): number => a.readUInt32LE(0);
/** The i-th fuse_forget_one after fuse_batch_forget_in. */
export const forgetOne = (a: Buffer, i: number) => {
  const at = InSize.BATCH_FORGET + i * InSize.FORGET_ONE;
  return { nodeid: u64(a, at), nlookup: u64(a, at + 8) };
};

/** The NUL-terminated names starting at `at` (one for most requests, two for RENAME). */
export function readNames(a: Buffer, at: number, count: number): string[] {
  const names: string[] = [];
  for (let i = 0; i < count; i++) {
    const end = a.indexOf(0, at);
    if (end < 0) throw new RangeError('name not NUL-terminated');
    names.push(a.toString('utf8', at, end));
    at = end + 1;
  }
  return names;
}

/** FUSE_REC_ALIGN: dirents are padded to 8 bytes. */
export const direntBytes = (nameBytes: number): number => (DIRENT_HEADER_BYTES + nameBytes + 7) & ~7;

/**
 * Writes one fuse_dirent at `at`; `off` is the offset the kernel passes back to continue after this
 * entry. Returns the padded size, or 0 when it does not fit before `end`.
 */
export function writeDirent(b: Buffer, at: number, end: number, d: DirentIn): number {
  const name = Buffer.from(d.name, 'utf8');
  const size = direntBytes(name.length);
  if (at + size > end) return 0;
  b.writeBigUInt64LE(d.ino, at);
  b.writeBigUInt64LE(BigInt(d.off), at + 8);
  b.writeUInt32LE(name.length, at + 16);
  b.writeUInt32LE(d.type, at + 20);
  name.copy(b, at + DIRENT_HEADER_BYTES);
  b.fill(0, at + DIRENT_HEADER_BYTES + name.length, at + size);
  return size;
}

export interface DirentIn {
  ino: bigint;
  off: number;
  /** DT_* as in dirent.h: the S_IFMT bits of the mode shifted right by 12. */
  type: number;
  name: string;
}
