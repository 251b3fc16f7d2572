// Rendezvous (highest-random-weight) hashing (DESIGN.md "Cluster", spec §7.1): each fragment ranks
// the members by weight, so every node computes the same ranking from the same member set, and a
// change of members changes only the ranks it must. The coordinator's planner places replicas by
// it (coordinator.ts), a new cluster's first lists included (firstPlacement).
//
// A Placement names members by their index in the sorted member list; its lists hold indices.

import { assert } from './assert.js';
import { compareIds } from './assignment-table.js';
import { RENDEZVOUS_RANKINGS_KEPT_MAX, RENDEZVOUS_SPARE_RANKS } from './limits.js';
import { sha256Head } from './sha256-head.js';

/** Replicas of a fragment when `--replicas` is not given: min(3, members). */
export const REPLICAS_DEFAULT_MAX = 3;

export interface Placement {
  /** Member node ids, sorted (byte order of their UTF-8): the index space of `replicas`. */
  readonly members: readonly string[];
  /** Per fragment, its replica member indices, most preferred first. */
  readonly replicas: ReadonlyArray<readonly number[]>;
}

const utf8 = new TextEncoder();
/** A member's id as the weight hashes it, with the separator: `id \0`, then the fragment's digits. */
function hashedPrefix(member: string): Uint8Array {
  const id = utf8.encode(member);
  const prefix = new Uint8Array(id.length + 1);
  prefix.set(id, 0);
  return prefix;
}

/** Room for the longest prefix and a fragment number's digits. */
let message = new Uint8Array(64);
const head = new Uint32Array(2);

/**
 * The rendezvous weight of (member, fragment): the first 8 bytes of SHA-256 over
 * `member \0 fragment` (decimal), left in `head` as big-endian halves.
 */
function weigh(prefix: Uint8Array, fragment: number): void {
  const digits = String(fragment);
  const length = prefix.length + digits.length;
  if (message.length < length) message = new Uint8Array(length * 2);
  message.set(prefix, 0);
  for (let i = 0; i < digits.length; i++) message[prefix.length + i] = digits.charCodeAt(i);
  sha256Head(message, length, head);
}

/** The weight as one number: the reference the kept ranking is checked against. */
export function rendezvousWeight(member: string, fragment: number): bigint {
  weigh(hashedPrefix(member), fragment);
  return (BigInt(head[0]) << 32n) | BigInt(head[1]);
}

/** Whether weight (hi, lo) of `id` ranks before weight (otherHi, otherLo) of `other`. */
function ranksBefore(
  hi: number,
  lo: number,
  id: string,
  otherHi: number,
  otherLo: number,
  other: string,
): boolean {
  if (hi !== otherHi) return hi > otherHi;
  if (lo !== otherLo) return lo > otherLo;
  // Ties are all but impossible with 64-bit weights; break them by member order to stay total.
  return compareIds(id, other) < 0;
}

/** One fragment's members in rendezvous order, as far as computed. */
interface RankedMembers {
  readonly ids: string[];
  readonly hi: number[];
  readonly lo: number[];
  /** The length it is kept to: it grows by the members that join ahead of its last. */
  depth: number;
  /** Every member is listed, so a rank past the list is past the members. */
  complete: boolean;
}

function insertRanked(list: RankedMembers, id: string, hi: number, lo: number): void {
  let at = list.ids.length;
  while (at > 0 && ranksBefore(hi, lo, id, list.hi[at - 1], list.lo[at - 1], list.ids[at - 1])) at--;
  list.ids.splice(at, 0, id);
  list.hi.splice(at, 0, hi);
  list.lo.splice(at, 0, lo);
}

function truncateRanked(list: RankedMembers, length: number): void {
  if (list.ids.length <= length) return;
  list.ids.length = length;
  list.hi.length = length;
  list.lo.length = length;
  list.complete = false;
}

/**
 * Every fragment's members in rendezvous order, computed on demand and kept across plans: each
 * fragment's list is exactly the first ranks over the current members, as deep as a caller asked
 * (plus RENDEZVOUS_SPARE_RANKS). A change of members updates the kept lists: a member that joins
 * is weighed once per listed fragment, one that goes is struck out, and a list struck short is
 * ranked again when a caller asks past it. So a plan over unchanged members hashes nothing, one
 * after a join hashes each fragment once, and only a cold one weighs every (member, fragment).
 */
export class RendezvousRanking {
  readonly fragmentCount: number;
  #members: string[] = [];
  #prefixes = new Map<string, Uint8Array>();
  #lists: Array<RankedMembers | undefined>;
  #weighed = 0;

  constructor(fragmentCount: number) {
    this.fragmentCount = fragmentCount;
    this.#lists = new Array<RankedMembers | undefined>(fragmentCount);
  }

  /** Ranks over `members` (distinct, any order) from now on. */
  setMembers(members: readonly string[]): void {
    const next = new Set(members);
    assert(next.size === members.length, 'rendezvous members must be distinct');
    const gone = this.#members.filter((id) => !next.has(id));
    const joined = members.filter((id) => !this.#prefixes.has(id));
    if (gone.length === 0 && joined.length === 0) return;
    this.#members = sortMembers(members);
    for (const id of gone) this.#prefixes.delete(id);
    for (const id of joined) this.#prefixes.set(id, hashedPrefix(id));
    // A change of most members keeps little worth updating: rank afresh on demand.
    if (gone.length + joined.length > members.length / 2) {
      this.#lists.fill(undefined);
      return;
    }
    const goneIds = new Set(gone);
    for (let fragment = 0; fragment < this.fragmentCount; fragment++) {
      const list = this.#lists[fragment];
      if (list === undefined) continue;
      for (let i = list.ids.length - 1; i >= 0; i--) {
        if (!goneIds.has(list.ids[i])) continue;
        list.ids.splice(i, 1);
        list.hi.splice(i, 1);
        list.lo.splice(i, 1);
      }
      if (list.ids.length === 0 && !list.complete) {
        this.#lists[fragment] = undefined;
        continue;
      }
      for (const id of joined) {
        weigh(this.#prefixes.get(id) as Uint8Array, fragment);
        this.#weighed++;
        const last = list.ids.length - 1;
        // Behind the last of an incomplete list it may rank behind members not listed: leave it out.
        if (
          !list.complete &&
          !ranksBefore(head[0], head[1], id, list.hi[last], list.lo[last], list.ids[last])
        )
          continue;
        insertRanked(list, id, head[0], head[1]);
        truncateRanked(list, list.depth);
      }
    }
  }

  /** Members weighed since this ranking was made (each a SHA-256 of a member and a fragment). */
  get weighed(): number {
    return this.#weighed;
  }

  /**
   * Ranks `fragments` that have no order kept, `depth` deep, weighing at most about `budget`
   * (whole fragments, at least one): true once every one has its order, so the next `at` up to
   * `depth` weighs nothing. A cold ranking over many members weighs F·N pairs (16 million at
   * 16 384 fragments and 1 000 members, seconds): a caller on the main thread ranks in slices.
   */
  warm(fragments: readonly number[], depth: number, budget: number): boolean {
    let spent = 0;
    for (const fragment of fragments) {
      const list = this.#lists[fragment];
      if (list !== undefined && (list.complete || list.ids.length >= Math.min(depth, this.#members.length)))
        continue;
      if (spent > 0 && spent + this.#members.length > budget) return false;
      this.#lists[fragment] = this.#rank(
        fragment,
        Math.max(list?.depth ?? 0, depth + RENDEZVOUS_SPARE_RANKS),
      );
      spent += this.#members.length;
    }
    return true;
  }

  /** The member `rank` places of `fragment`'s order from its first (0), or undefined past the members. */
  at(fragment: number, rank: number): string | undefined {
    if (!(fragment >= 0 && fragment < this.fragmentCount && Number.isInteger(fragment)))
      assert(false, `fragment ${fragment} outside 0..${this.fragmentCount - 1}`);
    if (rank >= this.#members.length) return undefined;
    let list = this.#lists[fragment];
    if (list === undefined || (rank >= list.ids.length && !list.complete)) {
      // Twice as deep as before at least: a caller that reads rank after rank weighs every member
      // a few times (log N), not once per RENDEZVOUS_SPARE_RANKS ranks.
      list = this.#rank(fragment, Math.max(2 * (list?.depth ?? 0), rank + 1 + RENDEZVOUS_SPARE_RANKS));
      this.#lists[fragment] = list;
    }
    return list.ids[rank];
  }

  /** Weighs every member for `fragment`, keeping the first `depth`. */
  #rank(fragment: number, depth: number): RankedMembers {
    const list: RankedMembers = { ids: [], hi: [], lo: [], depth, complete: true };
    this.#weighed += this.#members.length;
    for (const id of this.#members) {
      weigh(this.#prefixes.get(id) as Uint8Array, fragment);
      const last = list.ids.length - 1;
      if (
        last + 1 >= depth &&
        !ranksBefore(head[0], head[1], id, list.hi[last], list.lo[last], list.ids[last])
      )
        continue;
      insertRanked(list, id, head[0], head[1]);
      truncateRanked(list, depth);
    }
    list.complete = list.ids.length === this.#members.length;
    return list;
  }
}

/** Kept rankings by fragment count (a node has one table; a simulator runs many in one process). */
const rankings = new Map<number, RendezvousRanking>();

/** The kept ranking of `fragmentCount` fragments, over `members` from now on. */
export function rendezvousRanking(fragmentCount: number, members: readonly string[]): RendezvousRanking {
  let ranking = rankings.get(fragmentCount);
  if (ranking === undefined) {
    if (rankings.size >= RENDEZVOUS_RANKINGS_KEPT_MAX) rankings.clear();
    ranking = new RendezvousRanking(fragmentCount);
    rankings.set(fragmentCount, ranking);
  }
  ranking.setMembers(members);
  return ranking;
}

export function sortMembers(ids: Iterable<string>): string[] {
  return [...new Set(ids)].sort(compareIds);
}

/**
 * Replica lists by member id (a new cluster's, coordinator.ts firstPlacement) as member indices
 * over `members` sorted: the index space the node routes by.
 */
export function placementOf(members: Iterable<string>, lists: ReadonlyArray<readonly string[]>): Placement {
  const sorted = sortMembers(members);
  assert(sorted.length >= 1, 'placement needs at least one member');
  const index = new Map(sorted.map((id, i) => [id, i]));
  const replicas = lists.map((list) =>
    list.map((id) => {
      const member = index.get(id);
      assert(member !== undefined, `placement lists ${id}, not a member`);
      return member;
    }),
  );
  return { members: sorted, replicas };
}
