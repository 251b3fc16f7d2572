// What RESP commands and the embedded API reach keys through: the node's dispatcher on the main
// thread (rings to the owning workers), or a worker's own fragments behind its RESP port. Commands
// are written once against this; each face supplies its router.

import type { TesseraError } from '../core/errors.js';
import { Modifier } from '../core/modify.js';
import { Durability, OpKind, Priority } from '../core/ops.js';
import type { ResultHandler } from './worker-link.js';

/** A write or read-modify-write, as a caller fills it in (RESP connections reuse one). */
export interface WriteSpec {
  kind: typeof OpKind.Write | typeof OpKind.Modify;
  key: Uint8Array;
  /** Write: the value, or undefined for a tombstone (delete). Modify: SET / APPEND / SETRANGE bytes. */
  value: Uint8Array | undefined;
  /** Absolute deadline in wall ms, 0 for none. */
  expiresAtMs: number;
  priority: Priority;
  durability: Durability;
  /** Write: report whether a live value existed (costs a store read). */
  wantsPrior: boolean;
  modifier: Modifier;
  flags: number;
  arg: number;
  operand: Uint8Array | undefined;
  /** Other replicas that must acknowledge the write before it is answered (0: none, the plain path). */
  replicaAcks: number;
}

/** What a reused spec's buffers are between writes. */
const NO_BYTES = new Uint8Array(0);

/**
 * A blank spec, for a caller that fills one and submits it synchronously, call after call
 * (`submitWrite` copies what it needs into the ring): one object, not one per write. After each
 * submit the caller hands it to `releaseWriteSpec`.
 */
export function blankWriteSpec(): WriteSpec {
  return {
    kind: OpKind.Write,
    key: NO_BYTES,
    value: undefined,
    expiresAtMs: 0,
    priority: Priority.Default,
    durability: Durability.Store,
    wantsPrior: false,
    modifier: Modifier.Set,
    flags: 0,
    arg: 0,
    operand: undefined,
    replicaAcks: 0,
  };
}

/** Drops a reused spec's buffers once submitted, so the spec keeps no caller's bytes alive. */
export function releaseWriteSpec(spec: WriteSpec): void {
  spec.key = NO_BYTES;
  spec.value = undefined;
  spec.operand = undefined;
}

/** Returned by `readLocal` when the fragment must be read through its worker. */
export const NOT_LOCAL = Symbol('not-local');

/** Routes a face's reads and writes to the fragments that hold their keys. */
export interface KeyRouter {
  /** The wall clock of stamps and expiry checks on request paths, read once per run of commands. */
  readonly turnClock: { nowMs(): number };
  /** Grows each time some fragment's serving replica changes (always 0 outside a cluster). */
  readonly servingStamp: number;
  /** The fragment of the last write submitted (what a connection tracks for WAIT). */
  readonly lastWriteFragment: number;
  fragmentOf(key: Uint8Array): number;
  /**
   * The key's live record read on this thread, a view valid until the next read; undefined when
   * absent; NOT_LOCAL when the read must be queued behind the fragment's writes.
   */
  readLocal(fragment: number, key: Uint8Array, replica?: boolean): Uint8Array | undefined | typeof NOT_LOCAL;
  /** Queues a read; its result reaches `handler` with `token`. An error instead when it cannot be taken. */
  submitRead<T>(
    fragment: number,
    key: Uint8Array,
    priority: Priority,
    headerOnly: boolean,
    handler: ResultHandler<T>,
    token: T,
    replica?: boolean,
  ): TesseraError | undefined;
  /** Stamps and queues a write or modification; as `submitRead`. The caller checked the sizes. */
  submitWrite<T>(spec: WriteSpec, handler: ResultHandler<T>, token: T): TesseraError | undefined;
}
