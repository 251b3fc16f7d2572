// Static placement (DESIGN.md "Cluster", spec §7.1): every fragment has an ordered list of R replica
// nodes chosen by rendezvous (highest-random-weight) hashing, so every node computes the same lists
// from the same member set, and a change of members moves only the fragments it must.
//
// Members are identified by their index in the sorted member list; the lists hold indices.

import { createHash } from 'node:crypto';
import { assert } from './assert.js';
import { FRAGMENT_COUNT_MAX, RENDEZVOUS_CACHED_MEMBERS_MAX } from './limits.js';

/** Replicas of a fragment when `--replicas` is not given: min(3, members). */
export const REPLICAS_DEFAULT_MAX = 3;

export interface Placement {
  /** Member node ids, sorted (byte order of their UTF-8): the index space of `replicas`. */
  readonly members: readonly string[];
  /** Per fragment, its replica member indices, most preferred first. */
  readonly replicas: ReadonlyArray<readonly number[]>;
}

/** Each member's weights by fragment, as computed (0: not yet; a weight of 0 is computed each time). */
const cachedWeights = new Map<string, BigUint64Array>();

/** The rendezvous weight of (member, fragment): the first 8 bytes of SHA-256 over both. */
function weight(member: string, fragment: number): bigint {
  if (!Number.isInteger(fragment) || fragment < 0 || fragment >= FRAGMENT_COUNT_MAX)
    return hashedWeight(member, fragment);
  let weights = cachedWeights.get(member);
  if (weights === undefined) {
    if (cachedWeights.size >= RENDEZVOUS_CACHED_MEMBERS_MAX) cachedWeights.clear();
    weights = new BigUint64Array(FRAGMENT_COUNT_MAX);
    cachedWeights.set(member, weights);
  }
  const kept = weights[fragment]!;
  if (kept !== 0n) return kept;
  const computed = hashedWeight(member, fragment);
  weights[fragment] = computed;
  return computed;
}

function hashedWeight(member: string, fragment: number): bigint {
  const digest = createHash('sha256').update(member).update('\0').update(String(fragment)).digest();
  return digest.readBigUInt64BE(0);
}

export function sortMembers(ids: Iterable<string>): string[] {
  return [...new Set(ids)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/**
 * `ids` in the fragment's rendezvous order, most preferred first (as computePlacement lists them):
 * the order a replica list is kept in, so each member is first, and serves, for about 1/N of the
 * fragments it holds, whichever members joined or left since.
 */
export function rendezvousOrder(ids: readonly string[], fragment: number): string[] {
  const sorted = sortMembers(ids);
  const ranked = sorted.map((id, index) => ({ id, index, w: weight(id, fragment) }));
  ranked.sort((a, b) => (a.w === b.w ? a.index - b.index : a.w > b.w ? -1 : 1));
  return ranked.map((r) => r.id);
}

/** Replica lists of `fragments` fragments over `members` (any order), `replicas` per fragment. */
export function computePlacement(members: Iterable<string>, fragments: number, replicas: number): Placement {
  const sorted = sortMembers(members);
  assert(sorted.length >= 1, 'placement needs at least one member');
  assert(replicas >= 1 && replicas <= sorted.length, `replicas ${replicas} outside 1..${sorted.length}`);
  const lists: number[][] = [];
  for (let f = 0; f < fragments; f++) {
    const ranked = sorted.map((id, index) => ({ index, w: weight(id, f) }));
    // Ties are all but impossible with 64-bit weights; break them by member order to stay total.
    ranked.sort((a, b) => (a.w === b.w ? a.index - b.index : a.w > b.w ? -1 : 1));
    lists.push(ranked.slice(0, replicas).map((r) => r.index));
  }
  return { members: sorted, replicas: lists };
}

/**
 * The first replica of `fragment` that serves now: this node, or a peer `isUp` says is connected.
 * -1 when none is (every replica unreachable).
 */
export function firstServingReplica(
  placement: Placement,
  fragment: number,
  selfIndex: number,
  isUp: (member: number) => boolean,
): number {
  for (const member of placement.replicas[fragment]) {
    if (member === selfIndex || isUp(member)) return member;
  }
  return -1;
}
