// Typed operating errors, mirroring the seed's NodeError (spec §9.1). Each kind has a stable string
// `code` for users and a small number for the ring and the wire, where errors cross as
// `{ code, message }`.

import { ERROR_MESSAGE_BYTES_MAX } from './limits.js';

export const ErrorKind = {
  ShuttingDown: 1,
  Backpressure: 2,
  Superseded: 3,
  Expired: 4,
  Storage: 5,
  InvalidInput: 6,
  Network: 7,
  Internal: 8,
  /** The memory store holds more than `maxMemoryBytes`: writes that add data are refused (Redis's OOM). */
  OutOfMemory: 9,
  /**
   * A write that asked for replica acknowledgements did not get them in time: it is applied at the
   * serving replica and will replicate, but is not known to be on the replicas asked for.
   */
  ReplicaTimeout: 10,
  /**
   * No replica of the key's fragment is reachable from this node, or it does not know one yet (it
   * just joined): nothing was applied; retry once the cluster has settled.
   */
  Unavailable: 11,
} as const;
export type ErrorKind = (typeof ErrorKind)[keyof typeof ErrorKind];

export const ERROR_CODES: Record<ErrorKind, string> = {
  [ErrorKind.ShuttingDown]: 'TESSERA_SHUTTING_DOWN',
  [ErrorKind.Backpressure]: 'TESSERA_BACKPRESSURE',
  [ErrorKind.Superseded]: 'TESSERA_SUPERSEDED',
  [ErrorKind.Expired]: 'TESSERA_EXPIRED',
  [ErrorKind.Storage]: 'TESSERA_STORAGE',
  [ErrorKind.InvalidInput]: 'TESSERA_INVALID_INPUT',
  [ErrorKind.Network]: 'TESSERA_NETWORK',
  [ErrorKind.Internal]: 'TESSERA_INTERNAL',
  [ErrorKind.OutOfMemory]: 'TESSERA_OUT_OF_MEMORY',
  [ErrorKind.ReplicaTimeout]: 'TESSERA_REPLICA_TIMEOUT',
  [ErrorKind.Unavailable]: 'TESSERA_UNAVAILABLE',
};

/** The version that beat a write reported as Superseded. */
export interface Winner {
  wallMs: number;
  logical: number;
  nodeId: string;
  tombstone: boolean;
}

export class TesseraError extends Error {
  override name = 'TesseraError';
  readonly kind: ErrorKind;
  readonly code: string;
  /** Set only for Superseded. */
  readonly winner: Winner | undefined;

  constructor(kind: ErrorKind, message: string, winner?: Winner) {
    super(message);
    this.kind = kind;
    this.code = ERROR_CODES[kind];
    this.winner = winner;
  }
}

export function isErrorKind(n: number): n is ErrorKind {
  return n >= ErrorKind.ShuttingDown && n <= ErrorKind.Unavailable && Number.isInteger(n);
}

export const shuttingDown = (): TesseraError =>
  new TesseraError(ErrorKind.ShuttingDown, 'node is shutting down');

export const backpressure = (what: string): TesseraError =>
  new TesseraError(ErrorKind.Backpressure, `backpressure shed: ${what}`);

export const superseded = (w: Winner): TesseraError =>
  new TesseraError(
    ErrorKind.Superseded,
    `write was superseded by timestamp=${w.wallMs}.${w.logical} node_id=${w.nodeId} tombstone=${w.tombstone}`,
    w,
  );

export const replicaTimeout = (reached: number, wanted: number, timeoutMs: number): TesseraError =>
  new TesseraError(
    ErrorKind.ReplicaTimeout,
    `the write is applied locally but not yet replicated: ${reached} of ${wanted} replicas acknowledged it within ${timeoutMs} ms`,
  );

export const expired = (): TesseraError =>
  new TesseraError(ErrorKind.Expired, 'write expired before it could be applied');

export const storageError = (what: string): TesseraError =>
  new TesseraError(ErrorKind.Storage, `storage error: ${what}`);

export const outOfMemory = (usedBytes: number, maxBytes: number): TesseraError =>
  new TesseraError(
    ErrorKind.OutOfMemory,
    `out of memory: the memory store holds ${usedBytes} bytes, more than maxMemoryBytes (${maxBytes}); delete keys or raise the bound`,
  );

export const invalidInput = (what: string): TesseraError =>
  new TesseraError(ErrorKind.InvalidInput, `invalid input: ${what}`);

export const unavailable = (fragment: number): TesseraError =>
  new TesseraError(ErrorKind.Unavailable, `no replica of fragment ${fragment} is reachable`);

export const networkError = (what: string): TesseraError =>
  new TesseraError(ErrorKind.Network, `network error: ${what}`);

export const internalError = (what: string): TesseraError =>
  new TesseraError(ErrorKind.Internal, `internal error: ${what}`);

/** Cuts a message to the wire bound without splitting a UTF-8 character. */
export function truncateErrorMessage(message: string): string {
  if (message.length * 3 <= ERROR_MESSAGE_BYTES_MAX) return message;
  const bytes = Buffer.from(message, 'utf8');
  if (bytes.length <= ERROR_MESSAGE_BYTES_MAX) return message;
  let end = ERROR_MESSAGE_BYTES_MAX;
  // Step back over continuation bytes (10xxxxxx) so the cut lands on a character boundary.
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end).toString('utf8');
}

/** Turns anything thrown by a store into a Storage error, keeping TesseraErrors as they are. */
export function asStorageError(err: unknown): TesseraError {
  if (err instanceof TesseraError) return err;
  return storageError(err instanceof Error ? err.message : String(err));
}
