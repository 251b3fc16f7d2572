// What a writer did before a simulated power loss, and what must hold of the store read back from
// any crash state (issue: "what must hold on every crash state"):
//
// - no value is returned that was never written;
// - every write acknowledged at `stable` before the crash is present, or a later write of its key;
// - so a key's record is never older than the last one acknowledged at `stable` before the crash.
//
// Each write gives its key a value naming its sequence number (`writtenValue`), so a value read back names
// the write it came from. One writer issues a key's writes in sequence order over one connection
// (or one thread), so a key's later sequence number is its later write. A delete reads back as
// absence; absence also fits a key whose writes were all lost, when none was acknowledged stable.

import { seededFractions } from '../unit/fixtures/xorshift32.js';

/** One write the writer issued: a set of `writtenValue(key, seq)`, or a delete. */
export interface WriteRecord {
  key: string;
  seq: number;
  kind: 'set' | 'del';
  /** `process.hrtime.bigint()` when the writer saw it acknowledged; undefined: never acknowledged. */
  ackNs?: bigint;
  /**
   * When the writer learned the write survives power loss (its `stable` acknowledgement, or a sync
   * of a raw store that covered it); undefined: it never did.
   */
  stableNs?: bigint;
}

/** Fragments of the simulated node: as in a default cluster, so writes spread over many databases. */
export const NODE_FRAGMENTS = 16;

/** Bytes of padding in each value: enough that the stores' trees grow branch pages and overflow. */
const VALUE_PADDING = '.'.repeat(100);

export const writtenValue = (key: string, seq: number): string => `${key}=${seq};${VALUE_PADDING}`;

/** The sequence number a value names, or undefined when it is not a value of `key` in this form. */
export function seqOf(key: string, value: string): number | undefined {
  const match = /^([^=]*)=(\d+);(.*)$/s.exec(value);
  if (match === null || match[1] !== key || match[3] !== VALUE_PADDING) return undefined;
  return Number(match[2]);
}

/** The keys the history wrote, each once. */
export function keysOf(history: readonly WriteRecord[]): string[] {
  return [...new Set(history.map((w) => w.key))];
}

export interface Violation {
  key: string;
  /** What was read: a value, or null for absence. */
  read: string | null;
  reason: string;
}

/**
 * Checks the values read back (key → value or null) against the history, for a crash at `crashNs`
 * (a write acknowledged before it counts as acknowledged). Returns every violation, empty when the
 * state is sound.
 */
export function checkReadback(
  history: readonly WriteRecord[],
  crashNs: bigint,
  readback: ReadonlyMap<string, string | null>,
): Violation[] {
  const byKey = new Map<string, WriteRecord[]>();
  for (const w of history) {
    let list = byKey.get(w.key);
    if (list === undefined) byKey.set(w.key, (list = []));
    list.push(w);
  }
  const violations: Violation[] = [];
  for (const [key, writes] of byKey) {
    const read = readback.get(key);
    if (read === undefined) {
      violations.push({ key, read: null, reason: 'not read back' });
      continue;
    }
    const reason = checkKey(key, writes, crashNs, read);
    if (reason !== undefined) violations.push({ key, read, reason });
  }
  return violations;
}

function checkKey(
  key: string,
  writes: readonly WriteRecord[],
  crashNs: bigint,
  read: string | null,
): string | undefined {
  let floor: WriteRecord | undefined;
  for (const w of writes) {
    if (w.stableNs !== undefined && w.stableNs < crashNs && (floor === undefined || w.seq > floor.seq))
      floor = w;
  }
  if (read === null) {
    if (floor === undefined) return undefined;
    const laterDelete = writes.some((w) => w.kind === 'del' && w.seq >= floor.seq);
    return laterDelete ? undefined : `absent, but write ${floor.seq} (${floor.kind}) was acknowledged stable`;
  }
  const seq = seqOf(key, read);
  const write = seq === undefined ? undefined : writes.find((w) => w.seq === seq && w.kind === 'set');
  if (write === undefined) return 'a value that was never written';
  if (floor !== undefined && write.seq < floor.seq)
    return `write ${write.seq}, older than write ${floor.seq} (${floor.kind}) acknowledged stable`;
  return undefined;
}

/** The writes of a seeded workload, in the order a writer issues them: sets, and one delete in ten. */
export function workload(
  seed: number,
  keyCount: number,
  writeCount: number,
): Array<Omit<WriteRecord, 'stable'>> {
  const random = seededFractions(seed);
  const writes: Array<Omit<WriteRecord, 'stable'>> = [];
  for (let seq = 1; seq <= writeCount; seq++) {
    const key = `k${Math.floor(random() * keyCount)}`;
    writes.push({ key, seq, kind: random() < 0.1 ? 'del' : 'set' });
  }
  return writes;
}
