// The placement coordinator's pure core (datum-agent.md §2.2, §3.2, §3.5, §9.4):
// who coordinates, when it may act, how it takes over, and what it plans. No clock, no I/O: the
// membership view, the table, `nowMs` and the limits arrive as arguments.
//
// - The coordinator is the lowest node id among Up, reachable members of a node's own view, so
//   every node names the same one from the same view, with no election (datum §2.2).
// - It changes the table only while it reaches a majority of the table's members, so the minority
//   side of a partition never changes placement (§9.4 "split brain").
// - Takeover is datum's fail-closed rebuild (§3.5), but from every live member's persisted table
//   rather than from registries, so no assignment lives only on the old coordinator (§9.4 "unlucky
//   takeover"); the new coordinator opens the next table epoch.
// - The planner ranks by rendezvous (placement.ts), caps each node at ⌈F·R/N⌉ + slack, moves
//   add-before-remove, one transition per fragment, at most the per-node move limits in flight, and
//   keeps a pin while the pinned node is eligible, across failover too (§9.4 "Pinned").

import { assert } from './assert.js';
import {
  type ActiveAssignment,
  type AssignmentEntry,
  AssignmentTable,
  type CoordinatorIdentity,
  compareIds,
  type Fence,
  sameArrays,
  sameReplicas,
  type TableChange,
  withHistory,
} from './assignment-table.js';
import {
  PLACEMENT_BALANCE_SLACK_REPLICAS,
  PLACEMENT_MOVES_IN_PER_NODE_DEFAULT,
  PLACEMENT_MOVES_OUT_PER_NODE_DEFAULT,
} from './limits.js';
import type { MemberState } from './membership-types.js';
import { rendezvousRanking } from './placement.js';

/** One member as this node's membership view holds it (the membership machine supplies these). */
export interface MemberView {
  readonly id: string;
  readonly state: MemberState;
  /** This node reaches it now; always true for this node itself. */
  readonly reachable: boolean;
  readonly incarnation: number;
}

/** Lowest node id (byte order) among Up, reachable members; undefined when there is none. */
export function chooseCoordinator(view: readonly MemberView[]): CoordinatorIdentity | undefined {
  let best: MemberView | undefined;
  for (const member of view) {
    if (member.state !== 'Up' || !member.reachable) continue;
    if (best === undefined || compareIds(member.id, best.id) < 0) best = member;
  }
  return best === undefined ? undefined : { id: best.id, incarnation: best.incarnation };
}

/** Whether this view reaches more than half of `members` (the table's members, or the initial ones). */
export function reachesMajority(members: readonly string[], view: readonly MemberView[]): boolean {
  if (members.length === 0) return false;
  const reached = new Set<string>();
  for (const m of view) if (m.reachable && m.state !== 'Down' && m.state !== 'Removed') reached.add(m.id);
  const voters = new Set(members);
  let count = 0;
  for (const id of voters) if (reached.has(id)) count++;
  return count * 2 > voters.size;
}

/**
 * Whether this view still reaches a majority of the table's members once `changes` apply. The gate
 * counts the members before them; a change that takes the last replica of a reached member out of
 * the table (a finished move's source, a cancelled target) can leave only half of those left reached.
 */
export function reachesMajorityAfter(
  table: AssignmentTable,
  changes: readonly TableChange[],
  view: readonly MemberView[],
): boolean {
  // The members the table lists once the changes apply: those of the entries left as they are,
  // and those of the changed entries as they will be (one pass, no table built).
  const changed = new Set(changes.map((c) => c.fragment));
  const members = new Set<string>();
  for (const [fragment, entry] of table.entries()) {
    if (entry.kind === 'active' && !changed.has(fragment)) for (const id of entry.replicas) members.add(id);
  }
  for (const { entry } of changes)
    if (entry.kind === 'active') for (const id of entry.replicas) members.add(id);
  return reachesMajority([...members], view);
}

export type ActGate =
  | { readonly ok: true; readonly coordinator: CoordinatorIdentity }
  | { readonly ok: false; readonly reason: 'not-coordinator' | 'no-majority'; readonly message: string };

/** The gate before any table change: this node is the coordinator of its view and reaches a majority. */
export function mayChangeTable(
  selfId: string,
  view: readonly MemberView[],
  members: readonly string[],
): ActGate {
  const coordinator = chooseCoordinator(view);
  if (coordinator === undefined || coordinator.id !== selfId) {
    return {
      ok: false,
      reason: 'not-coordinator',
      message: `this node is not the placement coordinator (current: ${coordinator?.id ?? '<none>'})`,
    };
  }
  if (!reachesMajority(members, view)) {
    return {
      ok: false,
      reason: 'no-majority',
      message: `the coordinator reaches no majority of the table's ${new Set(members).size} members; placement is frozen`,
    };
  }
  return { ok: true, coordinator };
}

// ---- Takeover (datum §3.5 rebuild_from_registries, over persisted tables) ----

/** Reports that cannot both be true (fragment null: the tables as a whole). */
export interface TakeoverConflict {
  readonly fragment: number | null;
  readonly members: string[];
  readonly detail: string;
}

export type TakeoverResult =
  | { readonly kind: 'adopt'; readonly table: AssignmentTable; readonly changes: TableChange[] }
  | {
      readonly kind: 'refuse';
      /** Live members whose report is not in. */
      readonly missing: string[];
      readonly conflicting: TakeoverConflict[];
      readonly message: string;
    };

/**
 * Members whose table the rebuild needs: all but Down and Removed ones. An Up member that does not
 * answer defers the takeover until it is Down (fail-closed, as datum's collect_job_statuses): it may
 * hold the only copy of the old coordinator's last write.
 */
export function takeoverReporters(view: readonly MemberView[]): string[] {
  return view
    .filter((m) => m.state !== 'Down' && m.state !== 'Removed')
    .map((m) => m.id)
    .sort(compareIds);
}

/**
 * The table a new coordinator adopts from every live member's last accepted table: per fragment the
 * highest generation, a tombstone over an active entry of its generation (datum), a later epoch at
 * an equal generation; equal generation and epoch with different content is a conflict. The result
 * opens epoch max + 1 (or the epoch its reporters promised it, when higher) and re-stamps every entry with the new fence (datum re-stamps coordinator :=
 * self), keeping pins and moves in flight. `reports` holds this node's own table too; the caller
 * has passed `mayChangeTable` first, so the reporters include a majority of the table's members.
 */
export function rebuildFromReports(
  self: CoordinatorIdentity,
  view: readonly MemberView[],
  reports: ReadonlyMap<string, AssignmentTable>,
  /** The epoch the reporters promised this coordinator, when above max + 1. */
  promisedEpoch = 0,
): TakeoverResult {
  const reporters = takeoverReporters(view);
  const missing = reporters.filter((id) => !reports.has(id));
  if (missing.length > 0 || reporters.length === 0) return refuseTakeover(missing, []);
  const tables = reporters.map((id) => ({ id, table: reports.get(id) as AssignmentTable }));
  const conflicting = tableConflicts(tables);
  if (conflicting.length > 0) return refuseTakeover([], conflicting);
  const winners = new Map<number, { entry: AssignmentEntry; from: string }>();
  for (const { id, table } of tables) {
    for (const [fragment, entry] of table.entries()) {
      const held = winners.get(fragment);
      const order = held === undefined ? 1 : compareReported(entry, held.entry);
      if (order > 0) winners.set(fragment, { entry, from: id });
      else if (order === 0 && held !== undefined && !sameContent(entry, held.entry)) {
        const detail = `generation ${entry.generation} at epoch ${entry.fence.epoch} differs`;
        conflicting.push({ fragment, members: [held.from, id], detail });
      }
    }
  }
  if (conflicting.length > 0) return refuseTakeover([], conflicting);
  const epoch = Math.max(Math.max(...tables.map((t) => t.table.epoch)) + 1, promisedEpoch);
  const fence: Fence = { coordinatorId: self.id, incarnation: self.incarnation, epoch };
  const changes: TableChange[] = [...winners.keys()]
    .sort((a, b) => a - b)
    .map((fragment) => ({
      fence,
      fragment,
      entry: { ...(winners.get(fragment)?.entry as AssignmentEntry), fence },
    }));
  const fragmentCount = tables[0].table.fragmentCount;
  const table = AssignmentTable.from(fragmentCount, epoch, self, []);
  for (const change of changes) table.apply(change, self);
  return { kind: 'adopt', table, changes };
}

/** Reports that cannot be merged at all: other fragment counts, or one epoch claimed by two coordinators. */
function tableConflicts(tables: ReadonlyArray<{ id: string; table: AssignmentTable }>): TakeoverConflict[] {
  const conflicting: TakeoverConflict[] = [];
  const fragmentCount = tables[0].table.fragmentCount;
  const epochOwners = new Map<number, { owner: string; member: string }>();
  for (const { id, table } of tables) {
    if (table.fragmentCount !== fragmentCount) {
      const detail = `fragment counts ${fragmentCount} and ${table.fragmentCount}`;
      conflicting.push({ fragment: null, members: [tables[0].id, id], detail });
    }
    const owner = table.epochCoordinator;
    if (owner === undefined) continue;
    const key = `${owner.id}@${owner.incarnation}`;
    const known = epochOwners.get(table.epoch);
    if (known === undefined) epochOwners.set(table.epoch, { owner: key, member: id });
    else if (known.owner !== key) {
      const detail = `epoch ${table.epoch} claimed by ${known.owner} and ${key}`;
      conflicting.push({ fragment: null, members: [known.member, id], detail });
    }
  }
  return conflicting;
}

function refuseTakeover(missing: string[], conflicting: TakeoverConflict[]): TakeoverResult {
  const parts: string[] = [];
  if (missing.length === 0 && conflicting.length === 0) parts.push('no live member to report');
  if (missing.length > 0) parts.push(`no report from ${missing.join(', ')}`);
  for (const c of conflicting) {
    parts.push(
      `${c.fragment === null ? 'tables' : `fragment ${c.fragment}`} of ${c.members.join(' and ')} conflict: ${c.detail}`,
    );
  }
  return { kind: 'refuse', missing, conflicting, message: `takeover refused: ${parts.join('; ')}` };
}

/** >0 when `a` outranks `b`: generation, then a tombstone over an active entry, then epoch. */
function compareReported(a: AssignmentEntry, b: AssignmentEntry): number {
  if (a.generation !== b.generation) return a.generation - b.generation;
  if (a.kind !== b.kind) return a.kind === 'tombstone' ? 1 : -1;
  return a.fence.epoch - b.fence.epoch;
}

function sameContent(a: AssignmentEntry, b: AssignmentEntry): boolean {
  if (a.kind === 'tombstone' || b.kind === 'tombstone') return a.kind === b.kind;
  return (
    sameReplicas(a.replicas, b.replicas) &&
    a.pinnedTo === b.pinnedTo &&
    (a.moving?.source ?? null) === (b.moving?.source ?? null) &&
    (a.moving?.target ?? null) === (b.moving?.target ?? null)
  );
}

// ---- Planner ----

export interface MoveLimits {
  /** Moves a node receives at once (`--max-moves-per-node`). */
  readonly movesInPerNode: number;
  /** Moves a node sends at once. */
  readonly movesOutPerNode: number;
}

export const MOVE_LIMITS_DEFAULT: MoveLimits = {
  movesInPerNode: PLACEMENT_MOVES_IN_PER_NODE_DEFAULT,
  movesOutPerNode: PLACEMENT_MOVES_OUT_PER_NODE_DEFAULT,
};

/** One replica move to start: add `target`, then, once it has copied, remove `source`. */
export interface PlannedMove {
  readonly fragment: number;
  readonly source: string | null;
  readonly target: string;
  readonly reason: string;
  readonly replicasBefore: readonly string[];
  readonly replicasAfter: readonly string[];
}

export interface Plan {
  /** Per fragment with an active entry, the replica set it converges to (rendezvous order). */
  readonly desired: ReadonlyMap<number, readonly string[]>;
  /** The balance cap ⌈F·R/N⌉ + slack this plan kept. */
  readonly capReplicas: number;
  readonly moves: PlannedMove[];
  /** Fragments whose move in flight must be cancelled: its target is no longer eligible. */
  readonly cancellations: number[];
  /** Why some change cannot be planned now (too few eligible members). */
  readonly blocked: string[];
}

/** Members that may hold replicas: Up (Leaving, Exiting, Joining, Down and Removed may not). */
export function eligibleMembers(view: readonly MemberView[]): string[] {
  return view
    .filter((m) => m.state === 'Up')
    .map((m) => m.id)
    .sort(compareIds);
}

/**
 * Why the planner is blocked, or undefined: fewer eligible members than each fragment's replicas
 * (a Down or Leaving member's replicas can go nowhere). The only cause: with enough eligible
 * members, every fragment has a candidate for each replica it must replace. Cheap (the members
 * only), so a report can ask it without planning.
 */
export function tooFewEligible(view: readonly MemberView[], replicas: number): string | undefined {
  const eligible = eligibleMembers(view).length;
  return eligible < replicas
    ? `${eligible} eligible members cannot hold ${replicas} replicas of each fragment`
    : undefined;
}

/**
 * The ideal placement: by fragment, its R members in the order placed (indices into `members`, at
 * `slots[fragment·R + k]`). One typed array, not a list per fragment: it is placed again at every
 * change of members, and 16 384 lists each time cost a plan tens of milliseconds of collection.
 */
class IdealPlacement {
  readonly #index: Map<string, number>;

  constructor(
    readonly members: readonly string[],
    readonly replicas: number,
    readonly slots: Int32Array,
    readonly capReplicas: number,
  ) {
    this.#index = new Map(members.map((id, i) => [id, i]));
  }

  /** The member the ideal places `k`-th in `fragment`'s list. */
  at(fragment: number, k: number): string {
    return this.members[this.slots[fragment * this.replicas + k]];
  }

  /** `id`'s index in `members`; undefined for one that is not a member. */
  indexOf(id: string): number | undefined {
    return this.#index.get(id);
  }

  includes(fragment: number, id: string): boolean {
    const member = this.#index.get(id);
    if (member === undefined) return false;
    for (let k = 0, at = fragment * this.replicas; k < this.replicas; k++, at++)
      if (this.slots[at] === member) return true;
    return false;
  }

  /** `fragment`'s list, as a first table takes it. */
  list(fragment: number): string[] {
    return Array.from({ length: this.replicas }, (_, k) => this.at(fragment, k));
  }
}

/**
 * The placement over the members alone, as a first table places every fragment: pins first (while
 * eligible), then rendezvous ranks in rounds (every fragment's first choice, then every second…),
 * skipping a node at the cap. A function of the members, pins and fragments only. Pins count
 * toward the cap but are honoured past it: an operator who pins more fragments to one node than
 * the cap allows asked for that.
 */
function idealLists(
  fragments: readonly number[],
  pins: ReadonlyMap<number, string>,
  eligible: readonly string[],
  replicas: number,
  fragmentCount: number,
): IdealPlacement {
  const n = eligible.length;
  const r = Math.min(replicas, n);
  const capReplicas = n === 0 ? 0 : Math.ceil((fragments.length * r) / n) + PLACEMENT_BALANCE_SLACK_REPLICAS;
  const slots = new Int32Array(fragmentCount * r);
  const placed = new IdealPlacement(eligible, r, slots, capReplicas);
  if (n === 0) return placed;
  const ranking = rendezvousRanking(fragmentCount, eligible);
  /** By fragment, how many slots are filled; by member, how many it holds. */
  const filled = new Int32Array(fragmentCount);
  const count = new Int32Array(n);
  const holds = (fragment: number, member: number): boolean => {
    for (let at = fragment * r, end = at + filled[fragment]; at < end; at++)
      if (slots[at] === member) return true;
    return false;
  };
  const take = (fragment: number, member: number): void => {
    slots[fragment * r + filled[fragment]++] = member;
    count[member]++;
  };
  for (const fragment of fragments) {
    const pin = pins.get(fragment);
    const member = pin === undefined ? undefined : placed.indexOf(pin);
    if (member !== undefined && r > 0) take(fragment, member);
  }
  // Fragments still short, in order: most fill from their first ranks, so later rounds are short.
  let short = fragments.filter((fragment) => filled[fragment] < r);
  for (let rank = 0; rank < n && short.length > 0; rank++) {
    const stillShort: number[] = [];
    for (const fragment of short) {
      const member = placed.indexOf(ranking.at(fragment, rank) as string) as number;
      if (!holds(fragment, member) && count[member] < capReplicas) take(fragment, member);
      if (filled[fragment] < r) stillShort.push(fragment);
    }
    short = stillShort;
  }
  // The cap leaves N spare slots in all, but a fragment still short may already hold every member
  // with room: then a full fragment without such a member hands one of its own over, and takes it.
  for (const fragment of short) {
    while (filled[fragment] < r) {
      let roomy = -1;
      for (let m = 0; m < n && roomy === -1; m++)
        if (count[m] < capReplicas && !holds(fragment, m)) roomy = m;
      if (roomy !== -1) {
        take(fragment, roomy);
        continue;
      }
      let spare = -1;
      for (let m = 0; m < n && spare === -1; m++) if (count[m] < capReplicas) spare = m;
      assert(spare !== -1, 'the balance cap leaves a spare slot');
      const pinOf = (g: number): number | undefined => {
        const pin = pins.get(g);
        return pin === undefined ? undefined : placed.indexOf(pin);
      };
      /** A slot of full fragment `g` whose member `fragment` lacks (not g's pin), if g lacks `spare`. */
      const handable = (g: number): number => {
        if (filled[g] < r || holds(g, spare)) return -1;
        for (let at = g * r; at < g * r + r; at++)
          if (!holds(fragment, slots[at]) && slots[at] !== pinOf(g)) return at;
        return -1;
      };
      const donor = fragments.find((g) => handable(g) !== -1);
      assert(donor !== undefined, `fragment ${fragment} has no donor for its replica`);
      const at = handable(donor);
      const handed = slots[at];
      slots[at] = spare;
      count[spare]++;
      slots[fragment * r + filled[fragment]++] = handed;
    }
  }
  return placed;
}

/** The last ideal lists and what they were placed over: a plan at every interval mostly asks the same. */
let keptIdeal:
  | {
      readonly fragments: readonly number[];
      readonly pins: ReadonlyMap<number, string>;
      readonly eligible: readonly string[];
      readonly replicas: number;
      readonly fragmentCount: number;
      readonly placed: IdealPlacement;
    }
  | undefined;

/** `idealLists`, placed again only when its inputs changed (its lists are read, never changed). */
function keptIdealLists(...inputs: Parameters<typeof idealLists>): ReturnType<typeof idealLists> {
  const [fragments, pins, eligible, replicas, fragmentCount] = inputs;
  const kept = keptIdeal;
  if (
    kept !== undefined &&
    kept.replicas === replicas &&
    kept.fragmentCount === fragmentCount &&
    sameArrays(kept.eligible, eligible) &&
    sameArrays(kept.fragments, fragments) &&
    kept.pins.size === pins.size &&
    [...pins].every(([fragment, id]) => kept.pins.get(fragment) === id)
  )
    return kept.placed;
  const placed = idealLists(...inputs);
  keptIdeal = {
    fragments: [...fragments],
    pins: new Map(pins),
    eligible: [...eligible],
    replicas,
    fragmentCount,
    placed,
  };
  return placed;
}

/**
 * Replicas below which a member takes replicas from others: ⌊F·R/N⌋, an even share rounded down, so
 * a joiner takes a whole share (the cap's slack lets others hold one more while members leave).
 */
export function floorReplicas(fragments: number, replicas: number, eligible: number): number {
  return eligible === 0 ? 0 : Math.floor((fragments * Math.min(replicas, eligible)) / eligible);
}

/**
 * The placement every fragment converges to from the lists it has (`current`, a move in flight
 * counted as finished): the fewest changes that give every fragment R eligible replicas (its pin
 * among them), no member more than the cap, and no member fewer than the floor while another has
 * more. Each change takes a member the ideal placement (over the members alone) places there when
 * one can take it, so a joiner takes an even share where it ranks high, each replica from one
 * holder, a leaving or Down member's replicas go to the ideal's members, and nothing else moves.
 * A placement over the ideal alone moved up to twice the replicas a join needs past a few dozen
 * members: a tight cap shifts where each member's last replicas spill.
 *
 * Every change fills a missing replica, lowers a member over the cap, or raises one under the
 * floor, and none makes another (a taker stays within the cap, a giver at or above the floor), so
 * the lists converge and a plan over the lists they reach asks nothing. Plans made while moves
 * run may balance differently from the first (planMoves starts balancing moves only once those
 * before them are under way); a replica a repair placed then rarely moves once more. Deterministic
 * in its inputs.
 */
export function desiredPlacement(
  fragments: readonly number[],
  pins: ReadonlyMap<number, string>,
  eligible: readonly string[],
  replicas: number,
  fragmentCount: number,
  current: ReadonlyArray<readonly string[] | undefined>,
): { desired: Map<number, string[]>; capReplicas: number; changed: Map<number, number> } {
  const ideal = keptIdealLists(fragments, pins, eligible, replicas, fragmentCount);
  const { capReplicas } = ideal;
  const n = eligible.length;
  if (n === 0) return { desired: new Map(fragments.map((f) => [f, []])), capReplicas, changed: new Map() };
  const r = Math.min(replicas, n);
  const floor = floorReplicas(fragments.length, replicas, n);
  const isEligible = new Set(eligible);
  const ranking = rendezvousRanking(fragmentCount, eligible);
  const lists: string[][] = [];
  const count = new Map<string, number>(eligible.map((id) => [id, 0]));
  const countOf = (id: string): number => count.get(id) as number;
  const inIdeal = (fragment: number, id: string): boolean => ideal.includes(fragment, id);

  // The lists as they are, eligible members only, at most R (members the ideal keeps, the pin always).
  // A list that stays as it is is the table's own array until a change copies it (`own`): most
  // lists of a plan stay, and a copy of each cost a plan over 16 384 fragments milliseconds.
  const owned = new Uint8Array(fragmentCount);
  const own = (fragment: number): string[] => {
    if (owned[fragment] === 0) {
      lists[fragment] = [...lists[fragment]];
      owned[fragment] = 1;
    }
    return lists[fragment];
  };
  for (const fragment of fragments) {
    const pin = pins.get(fragment);
    const listed = current[fragment];
    if (
      listed !== undefined &&
      listed.length <= r &&
      (pin === undefined || !isEligible.has(pin) || listed.includes(pin)) &&
      listed.every((id) => isEligible.has(id))
    ) {
      for (const id of listed) count.set(id, countOf(id) + 1);
      lists[fragment] = listed as string[];
      continue;
    }
    owned[fragment] = 1;
    const kept: string[] = [];
    if (pin !== undefined && isEligible.has(pin)) kept.push(pin);
    // A fragment placed nowhere yet (a first table) takes the ideal's list.
    for (const id of current[fragment] ?? ideal.list(fragment))
      if (isEligible.has(id) && !kept.includes(id)) kept.push(id);
    while (kept.length > r) {
      let drop = kept.length - 1;
      for (let i = kept.length - 1; i >= 0; i--) {
        if (kept[i] !== pin && !inIdeal(fragment, kept[i])) {
          drop = i;
          break;
        }
      }
      kept.splice(drop, 1);
    }
    for (const id of kept) count.set(id, countOf(id) + 1);
    lists[fragment] = kept;
  }

  /**
   * The member to take a place in `fragment`'s list, under the cap: of the members the ideal places
   * there, the one holding fewest; unless `idealOnly`, else of all the one holding fewest (ties in
   * rendezvous order). The ideal's members first, so a member takes fragments where it ranks high
   * (who serves is evened out apart: `servingTransfers`).
   */
  const taker = (fragment: number, idealOnly: boolean): string | undefined => {
    const list = lists[fragment];
    let best: string | undefined;
    let fewest = capReplicas;
    const consider = (id: string): void => {
      const held = countOf(id);
      if (held < fewest && !list.includes(id)) {
        best = id;
        fewest = held;
      }
    };
    for (let k = 0; k < r; k++) consider(ideal.at(fragment, k));
    if (best !== undefined || idealOnly) return best;
    // The fewest any member outside the list holds, then the first in rendezvous order holding
    // that many: the ranking is read only as deep as that member (often its first ranks).
    for (const id of eligible) if (countOf(id) < fewest && !list.includes(id)) fewest = countOf(id);
    if (fewest === capReplicas) return undefined;
    for (let rank = 0; rank < n; rank++) {
      const id = ranking.at(fragment, rank) as string;
      if (countOf(id) === fewest && !list.includes(id)) return id;
    }
    assert(false, 'a member holding the fewest ranks somewhere');
  };
  /** Fragments in the order this placement changed them first: the order to move them in. */
  const changed = new Map<number, number>();
  const noteChange = (fragment: number): void => {
    if (!changed.has(fragment)) changed.set(fragment, changed.size);
  };
  const replace = (fragment: number, from: string, to: string): void => {
    const list = own(fragment);
    noteChange(fragment);
    list[list.indexOf(from)] = to;
    count.set(from, countOf(from) - 1);
    count.set(to, countOf(to) + 1);
  };

  // 1. Missing replicas (a member Down, Leaving or gone).
  for (const fragment of fragments) {
    if (lists[fragment].length >= r) continue;
    const list = own(fragment);
    while (list.length < r) {
      const id = taker(fragment, false) ?? handOver(fragment);
      noteChange(fragment);
      list.push(id);
      count.set(id, countOf(id) + 1);
    }
  }

  // 2. Members over the cap (it fell as members joined) give replicas the ideal does not place on
  //    them first, where a member the ideal places ranks highest first, to such a member (a joiner
  //    takes where it ranks first).
  /** The ideal's first rank for `fragment` whose member is not in its list; R when none. */
  const takerRank = (fragment: number): number => {
    for (let k = 0; k < r; k++) if (!lists[fragment].includes(ideal.at(fragment, k))) return k;
    return r;
  };
  // Each member's fragments, read in one pass (a join lowers the cap under most members). Only
  // members under the cap take replicas, so the fragments of those over it do not change but by
  // their own shedding.
  const over = eligible.filter((id) => countOf(id) > capReplicas);
  const heldBy = new Map<string, number[]>(over.map((id) => [id, []]));
  if (over.length > 0)
    for (const f of fragments) for (const id of lists[f]) if (pins.get(f) !== id) heldBy.get(id)?.push(f);
  for (const id of over) {
    const held = heldBy.get(id) as number[];
    const order = new Map(held.map((f) => [f, Number(inIdeal(f, id)) * (r + 1) + takerRank(f)]));
    held.sort((x, y) => (order.get(x) as number) - (order.get(y) as number) || x - y);
    for (const idealOnly of [true, false]) {
      for (const fragment of held) {
        if (countOf(id) <= capReplicas) break;
        if (!lists[fragment].includes(id)) continue;
        const to = taker(fragment, idealOnly);
        if (to !== undefined) replace(fragment, id, to);
      }
    }
  }

  /** By member, the fragments the ideal places it in: those where it ranks first, then second… */
  let idealPlacesByMember: Map<string, number[]> | undefined;
  const idealPlaces = (): Map<string, number[]> => {
    if (idealPlacesByMember !== undefined) return idealPlacesByMember;
    const byMember = new Map<string, number[]>();
    for (let rank = 0; rank < r; rank++) {
      for (const f of fragments) {
        const id = ideal.at(f, rank);
        let placed = byMember.get(id);
        if (placed === undefined) byMember.set(id, (placed = []));
        placed.push(f);
      }
    }
    idealPlacesByMember = byMember;
    return byMember;
  };

  // 3. Members under the floor (a joiner) take replicas where the ideal places them, where it
  //    ranks them first before second (so they serve their share: a list serves in rendezvous
  //    order), each from the holder with the most that the ideal does not place there; then
  //    anywhere from such a holder.
  for (const id of eligible) {
    if (countOf(id) >= floor) continue;
    const placed = idealPlaces().get(id) ?? [];
    for (const idealOnly of [true, false]) {
      for (const fragment of idealOnly ? placed : fragments) {
        if (countOf(id) >= floor) break;
        const list = lists[fragment];
        if (list.includes(id)) continue;
        let giver: string | undefined;
        for (const holder of list) {
          if (holder === pins.get(fragment) || countOf(holder) <= floor) continue;
          if (idealOnly && inIdeal(fragment, holder)) continue;
          if (giver === undefined || countOf(holder) > countOf(giver)) giver = holder;
        }
        if (giver !== undefined) replace(fragment, giver, id);
      }
    }
  }

  /**
   * A list still short with every member under the cap in it: a full list hands one over (as the
   * ideal does). With no such list (members over the cap keep their replicas until step 2, so the
   * full lists may all hold the one member with room), the member not in the list holding fewest
   * takes the place over the cap, and step 2 lowers it.
   */
  function handOver(fragment: number): string {
    const list = lists[fragment];
    const spare = eligible.find((id) => countOf(id) < capReplicas && !list.includes(id));
    if (spare !== undefined) return spare;
    const roomy = eligible.find((id) => countOf(id) < capReplicas) as string;
    assert(roomy !== undefined, 'the balance cap leaves a spare slot');
    for (const other of fragments) {
      const full = lists[other];
      if (other === fragment || full.length < r || full.includes(roomy)) continue;
      const handed = full.find((id) => !list.includes(id) && id !== pins.get(other));
      if (handed === undefined) continue;
      replace(other, handed, roomy);
      return handed;
    }
    const fewest = eligible
      .filter((id) => !list.includes(id))
      .reduce<string | undefined>(
        (best, id) => (best === undefined || countOf(id) < countOf(best) ? id : best),
        undefined,
      );
    assert(fewest !== undefined, `fragment ${fragment} has fewer eligible members than replicas`);
    return fewest;
  }

  const desired = new Map<number, string[]>();
  for (const fragment of fragments) desired.set(fragment, lists[fragment]);
  return { desired, capReplicas, changed };
}

const PRIORITY_REPAIR = 0;
const PRIORITY_LEAVE = 1;
const PRIORITY_PIN = 2;
/** A rebalance out of a member over the cap: before the others, as the placement lowered it first. */
const PRIORITY_OVER_CAP = 3;
const PRIORITY_REBALANCE = 4;

/** A move the plan may start: its PlannedMove is made only for those started (a plan may hold thousands). */
interface Candidate {
  readonly fragment: number;
  readonly source: string | null;
  readonly target: string;
  priority: number;
  /** Where the placement changed the fragment among its changes: the order within a priority. */
  readonly sequence: number;
}

/**
 * Ranks, `budget` weighs at most, the active fragments that have no rendezvous order kept over
 * the eligible members: true once a plan can read every order it needs without weighing (a
 * change of a few members only updates the kept orders, so this is true at once).
 */
export function rankForPlanning(
  table: AssignmentTable,
  view: readonly MemberView[],
  replicas: number,
  budget: number,
): boolean {
  const eligible = eligibleMembers(view);
  if (eligible.length === 0) return true;
  const fragments: number[] = [];
  for (const [fragment, entry] of table.entries()) if (entry.kind === 'active') fragments.push(fragment);
  const ranking = rendezvousRanking(table.fragmentCount, eligible);
  return ranking.warm(fragments, Math.min(replicas, eligible.length), budget);
}

/**
 * The moves to start now. Repairs (a Down source, a missing replica) first, then leaves, then pins,
 * then rebalancing; within one priority by fragment. One transition per fragment (Scylla's
 * INV-TABL-2); a node takes part in at most the limits' moves in or out, moves in flight counted; a
 * Down source is not charged (the copy comes from the other replicas). The target, and a source
 * that is charged, must be reachable: a move through an unreachable member waits.
 */
export function planMoves(
  table: AssignmentTable,
  view: readonly MemberView[],
  replicas: number,
  limits: MoveLimits = MOVE_LIMITS_DEFAULT,
): Plan {
  const members = new Map(view.map((m) => [m.id, m]));
  const eligible = eligibleMembers(view);
  const holders = new Set(table.members());
  const fragments: number[] = [];
  const pins = new Map<number, string>();
  const movesIn = new Map<string, number>();
  const movesOut = new Map<string, number>();
  const cancellations: number[] = [];
  for (const [fragment, entry] of table.entries()) {
    if (entry.kind !== 'active') continue;
    fragments.push(fragment);
    if (entry.pinnedTo !== null) pins.set(fragment, entry.pinnedTo);
    if (entry.moving === null) continue;
    if (!eligible.includes(entry.moving.target)) cancellations.push(fragment);
    bump(movesIn, entry.moving.target);
    if (entry.moving.source !== null && isAlive(members.get(entry.moving.source)))
      bump(movesOut, entry.moving.source);
  }
  const settled = settledLists(table, fragments);
  const { desired, capReplicas, changed } = desiredPlacement(
    fragments,
    pins,
    eligible,
    replicas,
    table.fragmentCount,
    settled,
  );
  const blocked: string[] = [];
  const tooFew = tooFewEligible(view, replicas);
  if (tooFew !== undefined) blocked.push(tooFew);
  const overCap = membersOverCap(settled, capReplicas);
  const candidates: Candidate[] = [];
  for (const fragment of fragments) {
    const entry = table.active(fragment) as ActiveAssignment;
    if (entry.moving !== null) continue;
    const wanted = desired.get(fragment) as string[];
    // A list the placement kept is the entry's own array.
    if (wanted === entry.replicas) continue;
    const sequence = changed.get(fragment) ?? Number.MAX_SAFE_INTEGER;
    fragmentCandidates(fragment, entry, wanted, sequence, members, overCap, candidates, blocked);
  }
  // Only as many moves out of a member over the cap as take it down to the cap lower it; the
  // rest out of it balance others (they wait with the other balancing moves).
  const excess = new Map(overCap);
  for (const candidate of candidates) {
    if (candidate.priority !== PRIORITY_OVER_CAP) continue;
    const source = candidate.source as string;
    const left = excess.get(source) as number;
    if (left > 0) excess.set(source, left - 1);
    else candidate.priority = PRIORITY_REBALANCE;
  }
  // Within a priority, in the order the placement made the changes (its preferences: a joiner's
  // fragments where it ranks first, before others), so the moves that start first are those the
  // next plan, made from the lists they leave, would also make.
  candidates.sort((a, b) => a.priority - b.priority || a.sequence - b.sequence || a.fragment - b.fragment);
  // The placement balances on the lists as repairs, leaves and pins leave them, and raises members
  // on the counts as lowering those over the cap leaves them: a balancing move waits for the level
  // before it, or it would balance counts the lists do not have yet and be undone later.
  const urgent = candidates.length === 0 ? PRIORITY_REBALANCE : candidates[0].priority;
  const moves: PlannedMove[] = [];
  const moving = new Set<number>();
  for (const candidate of candidates) {
    if (candidate.priority >= PRIORITY_OVER_CAP && candidate.priority > urgent) break;
    if (moving.has(candidate.fragment)) continue;
    const target = members.get(candidate.target);
    if (target === undefined || !target.reachable) continue;
    const source = candidate.source === null ? undefined : members.get(candidate.source);
    const sourceCharged = source !== undefined && isAlive(source);
    if (sourceCharged && !source.reachable) continue;
    if ((movesIn.get(candidate.target) ?? 0) >= limits.movesInPerNode) continue;
    if (sourceCharged && (movesOut.get(source.id) ?? 0) >= limits.movesOutPerNode) continue;
    bump(movesIn, candidate.target);
    if (sourceCharged) bump(movesOut, source.id);
    moving.add(candidate.fragment);
    moves.push(
      plannedMove(candidate, table.active(candidate.fragment) as ActiveAssignment, members, holders),
    );
  }
  return { desired, capReplicas, moves, cancellations, blocked };
}

/** Each fragment's replicas (by fragment) as they will be once its move in flight finishes (the source gone). */
function settledLists(table: AssignmentTable, fragments: readonly number[]): Array<readonly string[]> {
  const lists: Array<readonly string[]> = [];
  for (const fragment of fragments) {
    const entry = table.active(fragment) as ActiveAssignment;
    const source = entry.moving?.source ?? null;
    lists[fragment] = source === null ? entry.replicas : entry.replicas.filter((id) => id !== source);
  }
  return lists;
}

/** Members that hold more replicas than the cap in `lists`, with how many more. */
function membersOverCap(lists: ReadonlyArray<readonly string[]>, cap: number): Map<string, number> {
  const count = new Map<string, number>();
  for (const list of lists)
    if (list !== undefined) for (const id of list) count.set(id, (count.get(id) ?? 0) + 1);
  return new Map([...count].filter(([, n]) => n > cap).map(([id, n]) => [id, n - cap]));
}

/** A member that still serves its replicas, so a move out of it is charged to it (all but Down and Removed). */
function isAlive(member: MemberView | undefined): member is MemberView {
  return member !== undefined && member.state !== 'Down' && member.state !== 'Removed';
}

function bump(counts: Map<string, number>, id: string): void {
  counts.set(id, (counts.get(id) ?? 0) + 1);
}

/**
 * Adds to `candidates` the moves that would bring one fragment to its desired set: leavers paired
 * with arrivals in order.
 */
function fragmentCandidates(
  fragment: number,
  entry: ActiveAssignment,
  desired: readonly string[],
  sequence: number,
  members: ReadonlyMap<string, MemberView>,
  overCap: ReadonlyMap<string, number>,
  candidates: Candidate[],
  blocked: string[],
): void {
  const current = entry.replicas;
  if (current.length === desired.length && desired.every((id) => current.includes(id))) return;
  const leaving = current.filter((id) => !desired.includes(id));
  const arriving = desired.filter((id) => !current.includes(id));
  // Leavers that must go first: Down ones, then Leaving ones, then the rest (rebalance).
  leaving.sort((a, b) => sourcePriority(members.get(a)) - sourcePriority(members.get(b)));
  for (let i = 0; i < arriving.length; i++) {
    const source = i < leaving.length ? leaving[i] : null;
    const target = arriving[i];
    const priority =
      source === null
        ? PRIORITY_REPAIR
        : Math.min(
            sourcePriority(members.get(source)),
            target === entry.pinnedTo
              ? PRIORITY_PIN
              : overCap.has(source)
                ? PRIORITY_OVER_CAP
                : PRIORITY_REBALANCE,
          );
    candidates.push({ fragment, source, target, priority, sequence });
  }
  for (const stranded of leaving.slice(arriving.length)) {
    blocked.push(`fragment ${fragment}: no eligible member to replace ${stranded}`);
  }
}

/** The move a candidate the plan starts makes. */
function plannedMove(
  { fragment, source, target }: Candidate,
  entry: ActiveAssignment,
  members: ReadonlyMap<string, MemberView>,
  holders: ReadonlySet<string>,
): PlannedMove {
  const current = entry.replicas;
  const replicasAfter =
    source === null ? [...current, target] : current.map((id) => (id === source ? target : id));
  const reason = moveReason(source, target, entry, members, holders);
  return { fragment, source, target, reason, replicasBefore: current, replicasAfter };
}

function sourcePriority(member: MemberView | undefined): number {
  if (member === undefined || member.state === 'Down' || member.state === 'Removed') return PRIORITY_REPAIR;
  if (member.state === 'Leaving' || member.state === 'Exiting') return PRIORITY_LEAVE;
  return PRIORITY_REBALANCE;
}

function moveReason(
  source: string | null,
  target: string,
  entry: ActiveAssignment,
  members: ReadonlyMap<string, MemberView>,
  holders: ReadonlySet<string>,
): string {
  if (source !== null) {
    const priority = sourcePriority(members.get(source));
    if (priority === PRIORITY_REPAIR) return `node_down:${source}`;
    if (priority === PRIORITY_LEAVE) return `leave:${source}`;
  }
  if (target === entry.pinnedTo) return 'move';
  if (!holders.has(target)) return `join:${target}`;
  return 'rebalance';
}

/** What an operator asks the planner to preview (`/cluster/plan`). */
export type PlanQuestion =
  | { readonly action: 'now' }
  | { readonly action: 'join'; readonly node: string }
  | { readonly action: 'leave'; readonly node: string }
  | { readonly action: 'remove'; readonly node: string };

export interface PlanPreview {
  /** Every fragment whose replicas would change, from the table's list to the desired one. */
  readonly changes: ReadonlyArray<{ fragment: number; from: readonly string[]; to: readonly string[] }>;
  /** Replica copies that would move: one per replica added to a fragment. */
  readonly replicaMoves: number;
  /** The first wave the coordinator would start, within the per-node move limits. */
  readonly plan: Plan;
}

/**
 * The placement `question` would lead to, from `table` and the view: a join adds the node as an
 * Up member, a leave makes it Leaving, a remove makes it Removed. Deterministic: the same inputs
 * preview the same moves. Refuses (NotFound/Conflict) what the question cannot mean.
 */
export function previewPlan(
  table: AssignmentTable,
  view: readonly MemberView[],
  replicas: number,
  question: PlanQuestion,
  limits: MoveLimits = MOVE_LIMITS_DEFAULT,
): PlanPreview | { readonly status: 'NotFound' | 'Conflict'; readonly message: string } {
  let asked: MemberView[] = [...view];
  if (question.action !== 'now') {
    const known = view.find((m) => m.id === question.node);
    if (question.action === 'join') {
      if (known !== undefined && known.state !== 'Removed')
        return { status: 'Conflict', message: `node ${question.node} is a member already (${known.state})` };
      asked = [
        ...view.filter((m) => m.id !== question.node),
        { id: question.node, state: 'Up', reachable: true, incarnation: 0 },
      ];
    } else {
      if (known === undefined) return { status: 'NotFound', message: `no member ${question.node}` };
      const state: MemberState = question.action === 'leave' ? 'Leaving' : 'Removed';
      asked = view.map((m) => (m.id === question.node ? { ...m, state } : m));
    }
  }
  const plan = planMoves(table, asked, replicas, limits);
  const changes: Array<{ fragment: number; from: readonly string[]; to: readonly string[] }> = [];
  let replicaMoves = 0;
  for (const [fragment, to] of plan.desired) {
    const from = table.active(fragment)?.replicas ?? [];
    const added = to.filter((id) => !from.includes(id)).length;
    if (added === 0 && to.length === from.length) continue;
    replicaMoves += added;
    changes.push({ fragment, from, to });
  }
  return { changes, replicaMoves, plan };
}

/** Plan text for the operator (`/cluster/plan`), one line per move; the same plan prints the same. */
export function describePlan(plan: Plan): string {
  const lines = [`cap ${plan.capReplicas} moves ${plan.moves.length}`];
  for (const m of plan.moves) {
    lines.push(
      `fragment ${m.fragment}: [${m.replicasBefore.join(' ')}] -> [${m.replicasAfter.join(' ')}] (${m.reason})`,
    );
  }
  for (const f of plan.cancellations) lines.push(`fragment ${f}: cancel the move in flight`);
  for (const b of plan.blocked) lines.push(`blocked: ${b}`);
  return lines.join('\n');
}

// ---- The coordinator's table writes: each bumps the generation and records its history ----

/**
 * A new cluster's lists, by member id: every fragment placed by `desiredPlacement` from nothing (so
 * the coordinator's first plan asks no move), in serving order (`balanceServing`). The members a
 * cluster starts with compute it alike (cluster-config.ts), and the coordinator's first table is it.
 */
export function firstPlacement(
  members: readonly string[],
  fragmentCount: number,
  replicas: number,
): string[][] {
  const fragments = Array.from({ length: fragmentCount }, (_, i) => i);
  const eligible = [...members].sort(compareIds);
  const { desired } = desiredPlacement(fragments, new Map(), eligible, replicas, fragmentCount, []);
  return balanceServing(fragments.map((fragment) => desired.get(fragment) as string[]));
}

/**
 * Orders lists so each member is first, and serves, for an even share of the fragments it may: the
 * first replica serves the fragment's writes and reads, and rendezvous order alone left 3 members
 * of 16 fragments serving 2, 5 and 9. Fragment by fragment the listed member first the fewest times
 * so far goes first (ties: the list's order); then, while a member serves at least two more than
 * another it can hand a fragment to through a chain of lists (an augmenting path: each member on it
 * hands one fragment to the next), the chain is shifted. Each shift lowers the sum of squares, so
 * the loop ends, at the fewest the busiest member can serve. The others keep their order.
 * Deterministic in its input.
 */
export function balanceServing(lists: readonly (readonly string[])[]): string[][] {
  const ordered = lists.map((list) => [...list]);
  const serves = new Map<string, number>();
  const firstOf = new Map<string, Set<number>>();
  for (const list of ordered) for (const id of list) if (!firstOf.has(id)) firstOf.set(id, new Set());
  const servesOf = (id: string): number => serves.get(id) ?? 0;
  const setFirst = (fragment: number, at: number): void => {
    const list = ordered[fragment];
    list.unshift(...list.splice(at, 1));
  };
  for (const [fragment, list] of ordered.entries()) {
    if (list.length === 0) continue;
    let first = 0;
    for (let i = 1; i < list.length; i++) if (servesOf(list[i]) < servesOf(list[first])) first = i;
    if (first !== 0) setFirst(fragment, first);
    serves.set(list[0], servesOf(list[0]) + 1);
    firstOf.get(list[0])?.add(fragment);
  }
  const members = [...firstOf.keys()];
  // Shifts one chain from a member whose count `isSource` takes to one `isSink` takes; false if none.
  const shift = (isSource: (n: number) => boolean, isSink: (n: number) => boolean): boolean => {
    const via = new Map<string, { from: string; fragment: number }>();
    const queue = members.filter((id) => isSource(servesOf(id)));
    for (const id of queue) via.set(id, { from: id, fragment: -1 });
    for (let head = 0; head < queue.length; head++) {
      const u = queue[head];
      for (const fragment of firstOf.get(u) as Set<number>) {
        for (const v of ordered[fragment]) {
          if (via.has(v)) continue;
          via.set(v, { from: u, fragment });
          if (!isSink(servesOf(v))) {
            queue.push(v);
            continue;
          }
          serves.set(v, servesOf(v) + 1);
          for (let at = v; ; ) {
            const step = via.get(at) as { from: string; fragment: number };
            if (step.fragment === -1) {
              serves.set(at, servesOf(at) - 1);
              return true;
            }
            setFirst(step.fragment, ordered[step.fragment].indexOf(at));
            firstOf.get(step.from)?.delete(step.fragment);
            firstOf.get(at)?.add(step.fragment);
            at = step.from;
          }
        }
      }
    }
    return false;
  };
  for (let shifts = 0; shifts < ordered.length; shifts++) {
    let least = Number.POSITIVE_INFINITY;
    let most = 0;
    for (const id of members) {
      least = Math.min(least, servesOf(id));
      most = Math.max(most, servesOf(id));
    }
    if (most - least < 2) break;
    // Raise the least served first; failing that, lower the busiest.
    const raised = shift(
      (n) => n >= least + 2,
      (n) => n === least,
    );
    if (
      !raised &&
      !shift(
        (n) => n === most,
        (n) => n <= most - 2,
      )
    )
      break;
  }
  return ordered;
}

/** The first table: every fragment as `firstPlacement` lists it, generation 1. */
export function bootstrapChanges(
  fragmentCount: number,
  view: readonly MemberView[],
  replicas: number,
  fence: Fence,
  nowMs: number,
): TableChange[] {
  return firstPlacement(eligibleMembers(view), fragmentCount, replicas).map((list, fragment) => {
    const entry: ActiveAssignment = {
      kind: 'active',
      generation: 1,
      replicas: list,
      moving: null,
      pinnedTo: null,
      fence,
      history: [{ generation: 1, from: [], to: list, reason: 'bootstrap', timestampMs: nowMs }],
    };
    return { fence, fragment, entry };
  });
}

/** Add phase: the target joins the list (last, still copying). */
export function startMove(
  entry: ActiveAssignment,
  move: PlannedMove,
  fence: Fence,
  nowMs: number,
): TableChange {
  const replicas = [...entry.replicas, move.target];
  const moving = { source: move.source, target: move.target, reason: move.reason };
  return nextReplicas(move.fragment, entry, fence, replicas, moving, move.reason, nowMs);
}

/**
 * Remove phase, once the target has copied: the source leaves and the target takes its place (first
 * if the source served), the pinned node first, the others keep their order — so the serving shares
 * `balanceServing` gave a first table carry over, and no member but the target or the pin takes
 * serving over at a finish.
 */
export function finishMove(
  fragment: number,
  entry: ActiveAssignment,
  fence: Fence,
  nowMs: number,
): TableChange {
  const moving = entry.moving;
  assert(moving !== null, `fragment ${fragment} has no move in flight`);
  return nextReplicas(fragment, entry, fence, finishedReplicas(entry), null, moving.reason, nowMs);
}

/** The list an entry's move finishes with (`finishMove`). */
function finishedReplicas(entry: ActiveAssignment): string[] {
  const moving = entry.moving as NonNullable<ActiveAssignment['moving']>;
  const listed = entry.replicas.includes(moving.target);
  const kept = entry.replicas.filter((id) => id !== moving.target);
  const at = moving.source === null ? -1 : kept.indexOf(moving.source);
  if (!listed) {
    if (at !== -1) kept.splice(at, 1);
  } else if (at === -1) kept.push(moving.target);
  else kept[at] = moving.target;
  return servingOrder(kept, entry.pinnedTo);
}

/** A list with the pinned node first (while it holds a copy), the others in their order. */
export function servingOrder(replicas: readonly string[], pinnedTo: string | null): string[] {
  if (pinnedTo === null || replicas[0] === pinnedTo || !replicas.includes(pinnedTo)) return [...replicas];
  return [pinnedTo, ...replicas.filter((id) => id !== pinnedTo)];
}

/**
 * The member `selfId` takes the fragment's serving over from once the entry's move finishes: the
 * move's source, when the table lists it first and the finished list (`finishMove`'s order) puts
 * `selfId` first instead — a move away of the serving replica while another replica is pinned.
 * Null otherwise; also for the move's target, whose gained copy is verified before the move
 * finishes. The successor verifies its copy against the source meanwhile, as a gained copy is
 * verified, so the handover at the finish completes it without a round (failover-catch-up.ts)
 * while the fragment's requests wait.
 */
export function servingSuccessionSource(entry: ActiveAssignment, selfId: string): string | null {
  const moving = entry.moving;
  if (moving === null || moving.source === null || moving.target === selfId) return null;
  if (entry.replicas[0] !== moving.source || !entry.replicas.includes(selfId)) return null;
  return finishedReplicas(entry)[0] === selfId ? moving.source : null;
}

/** A change of a settled table's serving order: `to`, one of the fragment's replicas, serves it. */
export interface ServingTransfer {
  readonly fragment: number;
  readonly from: string;
  readonly to: string;
}

/**
 * Serving transfers that even out how many fragments each member serves (is first for), once the
 * table is settled: no move in flight, every listed member Up and reachable. A list's order changes
 * otherwise only where a move's target takes its source's place, so a joiner serves only the
 * fragments whose serving replica it replaced. A fragment whose first serves at least two more than
 * another of its replicas goes to the one serving fewest, the largest gap first (ties: the lowest
 * fragment, the list's order); a pinned fragment stays. At most `max`, each of another fragment;
 * each lowers the sum of squares of the counts, so they end. As CockroachDB moves leases to even
 * them out.
 */
export function servingTransfers(
  table: AssignmentTable,
  view: readonly MemberView[],
  max: number,
): ServingTransfer[] {
  const usable = new Set(view.filter((m) => m.state === 'Up' && m.reachable).map((m) => m.id));
  const serves = new Map<string, number>();
  const lists: Array<readonly string[] | undefined> = [];
  for (const [fragment, entry] of table.entries()) {
    if (entry.kind !== 'active') continue;
    if (entry.moving !== null || !entry.replicas.every((id) => usable.has(id))) return [];
    if (entry.replicas.length === 0) continue;
    for (const id of entry.replicas) if (!serves.has(id)) serves.set(id, 0);
    serves.set(entry.replicas[0], (serves.get(entry.replicas[0]) as number) + 1);
    if (entry.pinnedTo === null) lists[fragment] = entry.replicas;
  }
  const servesOf = (id: string): number => serves.get(id) as number;
  const transfers: ServingTransfer[] = [];
  while (transfers.length < max) {
    let best: ServingTransfer | undefined;
    let bestGap = 1;
    for (const [fragment, list] of lists.entries()) {
      if (list === undefined) continue;
      for (let i = 1; i < list.length; i++) {
        const gap = servesOf(list[0]) - servesOf(list[i]);
        if (gap > bestGap) {
          bestGap = gap;
          best = { fragment, from: list[0], to: list[i] };
        }
      }
    }
    if (best === undefined) break;
    const { fragment, from, to } = best;
    transfers.push(best);
    serves.set(from, servesOf(from) - 1);
    serves.set(to, servesOf(to) + 1);
    lists[fragment] = undefined; // one change per fragment and plan
  }
  return transfers;
}

/** A serving transfer: `to` goes first and serves, the others keep their order. */
export function transferServing(
  fragment: number,
  entry: ActiveAssignment,
  to: string,
  fence: Fence,
  nowMs: number,
): TableChange {
  assert(entry.moving === null && entry.replicas.includes(to), `fragment ${fragment}: no transfer to ${to}`);
  const replicas = [to, ...entry.replicas.filter((id) => id !== to)];
  // Recorded as a rebalance, a reason every version of the table reads.
  return nextReplicas(fragment, entry, fence, replicas, null, 'rebalance', nowMs);
}

/** Gives up a move in flight whose target left: the list returns to what it was. */
export function cancelMove(
  fragment: number,
  entry: ActiveAssignment,
  fence: Fence,
  nowMs: number,
): TableChange {
  const moving = entry.moving;
  assert(moving !== null, `fragment ${fragment} has no move in flight`);
  return nextReplicas(fragment, entry, fence, entry.replicas.slice(0, -1), null, moving.reason, nowMs);
}

/** The member holding a fragment's only whole copy (a move's target is still copying), if one does. */
function onlyCopyHolder(entry: ActiveAssignment): string | undefined {
  const whole = entry.replicas.filter((id) => id !== entry.moving?.target);
  return whole.length === 1 ? whole[0] : undefined;
}

/**
 * The fragments whose only whole copy the table places on `member`: were its copies lost, no other
 * replica would hold their data.
 */
export function onlyCopiesOn(table: AssignmentTable, member: string): number[] {
  const fragments: number[] = [];
  for (const [fragment, entry] of table.entries())
    if (entry.kind === 'active' && onlyCopyHolder(entry) === member) fragments.push(fragment);
  return fragments;
}

/** The members that hold some fragment's only whole copy (`onlyCopiesOn` is not empty), sorted. */
export function onlyCopyHolders(table: AssignmentTable): string[] {
  const holders = new Set<string>();
  for (const [, entry] of table.entries()) {
    const holder = entry.kind === 'active' ? onlyCopyHolder(entry) : undefined;
    if (holder !== undefined) holders.add(holder);
  }
  return [...holders].sort(compareIds);
}

/**
 * Before any table, the placement a static start configures (--peers), which the first table takes
 * over (the coordinator's bootstrap): the members it lists, and those holding some fragment's only
 * copy — as `table.members()` and `onlyCopyHolders` give them for a table.
 */
export function configuredHolders(placement: ReadonlyArray<readonly string[]>): {
  members: string[];
  onlyCopies: string[];
} {
  const members = new Set<string>();
  const onlyCopies = new Set<string>();
  for (const list of placement) {
    for (const id of list) members.add(id);
    if (list.length === 1) onlyCopies.add(list[0]);
  }
  return { members: [...members].sort(compareIds), onlyCopies: [...onlyCopies].sort(compareIds) };
}

/**
 * `member` is back without its earlier run's data (the memory store, a lost data directory): every
 * list that names it leaves it out, so no node serves, fails over to or copies from an empty copy,
 * and the planner restores R as for a Down member (its place taken by a new copy, on it or
 * elsewhere). A move it was the target of is cancelled; one it was the source of goes on as a
 * repair (no source). A fragment whose only whole copy it held keeps it listed (`onlyCopiesOn`):
 * nothing would replace it. Recorded as `node_down:X`, a reason every version of the table reads.
 */
export function dropLostCopies(
  table: AssignmentTable,
  member: string,
  fence: Fence,
  nowMs: number,
): TableChange[] {
  const changes: TableChange[] = [];
  for (const [fragment, entry] of table.entries()) {
    if (entry.kind !== 'active' || !entry.replicas.includes(member)) continue;
    if (onlyCopyHolder(entry) === member) continue;
    const moving = entry.moving;
    const replicas = entry.replicas.filter((id) => id !== member);
    const next =
      moving === null || moving.target === member
        ? null
        : moving.source === member
          ? { ...moving, source: null }
          : moving;
    changes.push(nextReplicas(fragment, entry, fence, replicas, next, `node_down:${member}`, nowMs));
  }
  return changes;
}

/** The change to `replicas` at the next generation, under `fence`, with its history entry. */
function nextReplicas(
  fragment: number,
  entry: ActiveAssignment,
  fence: Fence,
  replicas: string[],
  moving: ActiveAssignment['moving'],
  reason: string,
  nowMs: number,
): TableChange {
  const generation = entry.generation + 1;
  return change(fragment, fence, {
    ...entry,
    generation,
    replicas,
    moving,
    fence,
    history: withHistory(entry.history, {
      generation,
      from: entry.replicas,
      to: replicas,
      reason,
      timestampMs: nowMs,
    }),
  });
}

/**
 * The coordinator's entry again, above `generation`: a member holds that generation from an older
 * coordinator's change that reached no majority (the takeover never saw it), and ignores the
 * coordinator's lower one, so the tables would differ forever. Same replicas, the coordinator's fence.
 */
export function reissueAbove(
  fragment: number,
  entry: ActiveAssignment,
  generation: number,
  fence: Fence,
  nowMs: number,
): TableChange {
  assert(generation >= entry.generation, 'a reissue goes above the entry');
  return nextReplicas(
    fragment,
    { ...entry, generation },
    fence,
    [...entry.replicas],
    entry.moving,
    'reissue',
    nowMs,
  );
}

/** `move FRAGMENT --to NODE`: records the pin; the planner then moves a replica there (reason `move`). */
export function pinFragment(
  fragment: number,
  entry: ActiveAssignment,
  node: string,
  view: readonly MemberView[],
  fence: Fence,
): TableChange | { readonly status: 'NotFound'; readonly message: string } {
  if (!eligibleMembers(view).includes(node)) {
    return { status: 'NotFound', message: `pinned node is not eligible for placement: ${node}` };
  }
  // A pinned node that holds a copy already serves it now; one that does not, once its copy finishes.
  const replicas = entry.moving === null ? servingOrder(entry.replicas, node) : entry.replicas;
  return change(fragment, fence, {
    ...entry,
    generation: entry.generation + 1,
    replicas,
    pinnedTo: node,
    fence,
  });
}

function change(fragment: number, fence: Fence, entry: ActiveAssignment): TableChange {
  return { fence, fragment, entry };
}
