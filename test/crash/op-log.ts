// The crash recorder's op log: what ./fuse-recorder.ts saw the kernel ask of the file system, in the
// order it answered, and what ./crash-states.ts turns into power-loss crash states.
//
// A log is an 8-byte magic, "TSOPLOG1", then records back to back:
//
//   offset  size  field
//   0       4     recordBytes  u32 LE, the whole record, this header included
//   4       4     crc32        u32 LE, CRC-32 (IEEE) of bytes [8, recordBytes)
//   8       1     kind         u8 (OpKindCode)
//   9       3     zero
//   12      4     pathBytes    u32 LE
//   16      8     atNs         u64 LE, process.hrtime.bigint() (CLOCK_MONOTONIC) when the request arrived
//   24      8     arg          u64 LE: write → offset, truncate → size, fsync → FsyncFlag bits, else 0
//   32      4     path2Bytes   u32 LE: rename, link → the new path's bytes, else 0
//   36      4     dataBytes    u32 LE: write → the data's bytes, else 0
//   40      …     path (UTF-8), then path2, then data
//
// rename and link name two paths: path is the existing name (`from`), path2 the new one (`to`).
//
// Paths are relative to the mounted directory, '/'-separated, without a leading '/'; the root
// directory is ''. A log ends at the end of its bytes; a record cut short or failing its checksum
// means the log is damaged (the recorder never tears a record: it writes whole records and only
// stops after flushing), and is rejected rather than read up to the damage.

import { crc32 } from 'node:zlib';

export const OP_LOG_MAGIC = Buffer.from('TSOPLOG1', 'latin1');
export const OP_RECORD_HEADER_BYTES = 40;
/** A write request never carries more than the recorder's max_write (1 MiB); this leaves room. */
export const OP_DATA_BYTES_MAX = 64 * 1024 * 1024;
/** PATH_MAX. */
export const OP_PATH_BYTES_MAX = 4096;

export type Op =
  | { kind: 'write'; atNs: bigint; path: string; offset: number; data: Buffer }
  | { kind: 'truncate'; atNs: bigint; path: string; size: number }
  | { kind: 'fsync'; atNs: bigint; path: string; datasync: boolean; dir: boolean }
  | { kind: 'create'; atNs: bigint; path: string }
  | { kind: 'mkdir'; atNs: bigint; path: string }
  | { kind: 'unlink'; atNs: bigint; path: string }
  | { kind: 'rmdir'; atNs: bigint; path: string }
  | { kind: 'rename'; atNs: bigint; from: string; to: string }
  /** A hard link: `to` becomes a second name of the file at `from`. */
  | { kind: 'link'; atNs: bigint; from: string; to: string };

export type OpKind = Op['kind'];

const KIND_CODES: Record<OpKind, number> = {
  write: 1,
  truncate: 2,
  fsync: 3,
  create: 4,
  mkdir: 5,
  unlink: 6,
  rmdir: 7,
  rename: 8,
  link: 9,
};
const KIND_BY_CODE = new Map<number, OpKind>(Object.entries(KIND_CODES).map(([k, c]) => [c, k as OpKind]));

/** fsync's arg bits. */
export const FsyncFlag = { DATASYNC: 1, DIR: 2 } as const;

/** The ops that name two paths (`from` and `to`), recorded as path and path2. */
export type TwoPathOp = Extract<Op, { from: string }>;

export function isTwoPathOp(op: Op): op is TwoPathOp {
  return op.kind === 'rename' || op.kind === 'link';
}

export class OpLogError extends Error {
  override name = 'OpLogError';
}

/** One record's bytes. */
export function encodeOp(op: Op): Buffer {
  const two = isTwoPathOp(op);
  const path = Buffer.from(two ? op.from : op.path, 'utf8');
  const path2 = two ? Buffer.from(op.to, 'utf8') : EMPTY;
  const data = op.kind === 'write' ? op.data : EMPTY;
  const total = OP_RECORD_HEADER_BYTES + path.length + path2.length + data.length;
  const b = Buffer.allocUnsafe(total);
  b.writeUInt32LE(total, 0);
  b.writeUInt32LE(KIND_CODES[op.kind], 8); // kind, then the three zero bytes
  b.writeUInt32LE(path.length, 12);
  b.writeBigUInt64LE(op.atNs, 16);
  b.writeBigUInt64LE(BigInt(argOf(op)), 24);
  b.writeUInt32LE(path2.length, 32);
  b.writeUInt32LE(data.length, 36);
  path.copy(b, OP_RECORD_HEADER_BYTES);
  path2.copy(b, OP_RECORD_HEADER_BYTES + path.length);
  data.copy(b, OP_RECORD_HEADER_BYTES + path.length + path2.length);
  b.writeUInt32LE(crc32(b.subarray(8)), 4);
  return b;
}

/** A whole log: the magic, then each op's record. */
export function encodeOpLog(ops: readonly Op[]): Buffer {
  return Buffer.concat([OP_LOG_MAGIC, ...ops.map(encodeOp)]);
}

const EMPTY = Buffer.alloc(0);

function argOf(op: Op): number {
  switch (op.kind) {
    case 'write':
      return op.offset;
    case 'truncate':
      return op.size;
    case 'fsync':
      return (op.datasync ? FsyncFlag.DATASYNC : 0) | (op.dir ? FsyncFlag.DIR : 0);
    default:
      return 0;
  }
}

/**
 * The ops of a whole log. Write data are views into `bytes` (no copy: recordings run to tens of
 * MB), so `bytes` must not be changed while they are in use.
 */
export function readOpLog(bytes: Buffer): Op[] {
  if (bytes.length < OP_LOG_MAGIC.length || !bytes.subarray(0, OP_LOG_MAGIC.length).equals(OP_LOG_MAGIC)) {
    throw new OpLogError('not an op log: bad magic');
  }
  const ops: Op[] = [];
  let at = OP_LOG_MAGIC.length;
  while (at < bytes.length) {
    const [op, next] = readRecord(bytes, at, ops.length);
    ops.push(op);
    at = next;
  }
  return ops;
}

function readRecord(b: Buffer, at: number, index: number): [Op, number] {
  const where = `record ${index} at byte ${at}`;
  if (b.length - at < OP_RECORD_HEADER_BYTES) throw new OpLogError(`${where}: header cut short`);
  const total = b.readUInt32LE(at);
  const pathBytes = b.readUInt32LE(at + 12);
  const path2Bytes = b.readUInt32LE(at + 32);
  const dataBytes = b.readUInt32LE(at + 36);
  if (pathBytes > OP_PATH_BYTES_MAX || path2Bytes > OP_PATH_BYTES_MAX || dataBytes > OP_DATA_BYTES_MAX) {
    throw new OpLogError(`${where}: field lengths out of range`);
  }
  if (total !== OP_RECORD_HEADER_BYTES + pathBytes + path2Bytes + dataBytes) {
    throw new OpLogError(`${where}: recordBytes ${total} disagrees with its fields`);
  }
  if (b.length - at < total) throw new OpLogError(`${where}: cut short (${b.length - at} of ${total} bytes)`);
  if (crc32(b.subarray(at + 8, at + total)) !== b.readUInt32LE(at + 4)) {
    throw new OpLogError(`${where}: checksum mismatch`);
  }
  const kind = KIND_BY_CODE.get(b.readUInt8(at + 8));
  if (kind === undefined || b.readUIntLE(at + 9, 3) !== 0) throw new OpLogError(`${where}: unknown kind`);
  const p = at + OP_RECORD_HEADER_BYTES;
  const fields: RecordFields = {
    kind,
    atNs: b.readBigUInt64LE(at + 16),
    arg: b.readBigUInt64LE(at + 24),
    path: b.toString('utf8', p, p + pathBytes),
    path2: b.toString('utf8', p + pathBytes, p + pathBytes + path2Bytes),
    data: b.subarray(p + pathBytes + path2Bytes, at + total),
  };
  return [opOf(fields, where), at + total];
}

interface RecordFields {
  kind: OpKind;
  atNs: bigint;
  arg: bigint;
  path: string;
  path2: string;
  data: Buffer;
}

function opOf(r: RecordFields, where: string): Op {
  const { kind, atNs, path } = r;
  const two = kind === 'rename' || kind === 'link';
  if (!two && r.path2.length > 0) throw new OpLogError(`${where}: ${kind} with a second path`);
  if (kind !== 'write' && r.data.length > 0) throw new OpLogError(`${where}: ${kind} with data`);
  if (r.arg > BigInt(Number.MAX_SAFE_INTEGER)) throw new OpLogError(`${where}: arg out of range`);
  const arg = Number(r.arg);
  if (kind !== 'write' && kind !== 'truncate' && kind !== 'fsync' && arg !== 0) {
    throw new OpLogError(`${where}: ${kind} with a nonzero arg`);
  }
  switch (kind) {
    case 'write':
      return { kind, atNs, path, offset: arg, data: r.data };
    case 'truncate':
      return { kind, atNs, path, size: arg };
    case 'fsync':
      if (arg & ~(FsyncFlag.DATASYNC | FsyncFlag.DIR)) throw new OpLogError(`${where}: unknown fsync flags`);
      return {
        kind,
        atNs,
        path,
        datasync: (arg & FsyncFlag.DATASYNC) !== 0,
        dir: (arg & FsyncFlag.DIR) !== 0,
      };
    case 'rename':
    case 'link':
      return { kind, atNs, from: path, to: r.path2 };
    default:
      return { kind, atNs, path };
  }
}

/** One line per op, for assertion messages and debugging. */
export function describeOp(op: Op): string {
  switch (op.kind) {
    case 'write':
      return `write ${op.path} ${op.offset}+${op.data.length}`;
    case 'truncate':
      return `truncate ${op.path} ${op.size}`;
    case 'fsync':
      return `fsync${op.dir ? 'dir' : ''}${op.datasync ? ' datasync' : ''} ${op.path}`;
    case 'rename':
    case 'link':
      return `${op.kind} ${op.from} ${op.to}`;
    default:
      return `${op.kind} ${op.path}`;
  }
}
