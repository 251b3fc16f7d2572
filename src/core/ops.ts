// The vocabulary operations share across the API, the rings and the fragment actor.

/** Scheduling class of an operation (spec §8.1): High is isolated from bulk; Background is rate-limited. */
export const Priority = { High: 0, Default: 1, Background: 2 } as const;
export type Priority = (typeof Priority)[keyof typeof Priority];
export const PRIORITY_NAMES = ['high', 'default', 'background'] as const;
export type PriorityName = (typeof PRIORITY_NAMES)[number];

/**
 * When a write is acknowledged (DESIGN.md "Durability"): applied and readable (memory), committed in
 * the store (store), or fsynced (stable).
 */
export const Durability = { Memory: 0, Store: 1, Stable: 2 } as const;
export type Durability = (typeof Durability)[keyof typeof Durability];
export const DURABILITY_NAMES = ['memory', 'store', 'stable'] as const;
export type DurabilityName = (typeof DURABILITY_NAMES)[number];

export const OpKind = {
  /** Store a record (value or tombstone) under LWW. */
  Write: 1,
  /** Read a key's live record. */
  Read: 2,
  /** Read-modify-write decided in the actor (src/core/modify.ts): SET NX/XX/GET, INCR, EXPIRE… */
  Modify: 3,
  /** Reply once everything admitted before it has reached a durability level. */
  Fence: 4,
} as const;
export type OpKind = (typeof OpKind)[keyof typeof OpKind];

/** How an operation ended, as the fragment actor reports it. */
export const Reply = {
  Applied: 1,
  AlreadyPresent: 2,
  Superseded: 3,
  Expired: 4,
  Found: 5,
  NotFound: 6,
  Backpressure: 7,
  FenceReached: 8,
  StorageFailed: 9,
  /** A modification's condition did not hold; nothing was written. */
  NotApplied: 10,
  /** A modification's integer answer (ASCII text). */
  Integer: 11,
  /** A modification's string answer (INCRBYFLOAT). */
  Text: 12,
  /** A modification refused with a Redis error (value not an integer…); nothing was written. */
  Refused: 13,
} as const;
export type Reply = (typeof Reply)[keyof typeof Reply];
export const REPLY_NAMES: Record<Reply, string> = {
  1: 'applied',
  2: 'already-present',
  3: 'superseded',
  4: 'expired',
  5: 'found',
  6: 'not-found',
  7: 'backpressure',
  8: 'fence-reached',
  9: 'storage-failed',
  10: 'not-applied',
  11: 'integer',
  12: 'text',
  13: 'refused',
};

/** Replies of a write that wrote nothing: they stand as they are, whatever its replicas reached. */
export function isWriteRefusal(reply: number): boolean {
  return (
    reply === Reply.Superseded ||
    reply === Reply.Expired ||
    reply === Reply.Backpressure ||
    reply === Reply.StorageFailed ||
    reply === Reply.NotApplied ||
    reply === Reply.Refused
  );
}

export function parsePriority(name: string): Priority | undefined {
  const i = (PRIORITY_NAMES as readonly string[]).indexOf(name);
  return i === -1 ? undefined : (i as Priority);
}

export function parseDurability(name: string): Durability | undefined {
  const i = (DURABILITY_NAMES as readonly string[]).indexOf(name);
  return i === -1 ? undefined : (i as Durability);
}
