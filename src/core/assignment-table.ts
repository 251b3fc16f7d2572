// The assignment table (datum-agent.md §3.3–§3.5): per fragment an ordered replica
// list, a generation and a bounded history, written only by the placement coordinator and replicated
// to every node, which keeps the last table it accepted so that it can route and can take over.
//
// Every change carries its fence (coordinator id, coordinator incarnation, table epoch). Receivers
// apply datum's rules (§3.4): the change must come from the coordinator their own view names, a
// generation only grows, an equal generation is accepted only for the same replicas and from the same
// or the current coordinator, a tombstone outranks an active entry of its generation or lower, and an
// active entry must strictly exceed a tombstone. Two of the seed's hazards (§9.4) are closed here:
// - split brain: each takeover opens a new table epoch, a receiver refuses an epoch below the one it
//   holds and a second coordinator under the epoch it holds, so a stale coordinator that still
//   believes itself current is refused by every node that has heard from its successor;
// - unpruned tombstones: a tombstone occupies its fragment's slot, so the table never holds more than
//   one entry per fragment however much churn there is.
// The fence is checked again where a change takes effect (`isCurrent`), not only where it arrives.

import { invalidInput } from './errors.js';
import {
  ASSIGNMENT_HISTORY_ENTRIES_MAX,
  ASSIGNMENT_REASON_BYTES_MAX,
  FRAGMENT_COUNT_MAX,
  NODE_ID_BYTES_MAX,
  REPLICAS_PER_FRAGMENT_MAX,
} from './limits.js';

/** A coordinator as the fence names it: a restart (new incarnation) is a different coordinator. */
export interface CoordinatorIdentity {
  readonly id: string;
  readonly incarnation: number;
}

/** What every table change carries; `epoch` grows by one at each takeover. */
export interface Fence {
  readonly coordinatorId: string;
  readonly incarnation: number;
  readonly epoch: number;
}

/** One change of a fragment's replicas; `from`/`to` are the replica lists before and after. */
export interface HistoryEntry {
  readonly generation: number;
  readonly from: readonly string[];
  readonly to: readonly string[];
  /** `bootstrap`, `join:X`, `leave:X`, `node_down:X`, `rebalance` or `move`. */
  readonly reason: string;
  readonly timestampMs: number;
}

/**
 * A replica move in flight (add before remove): `target` is already listed last in the replicas,
 * still copying; `source` (null when the fragment was short of a replica) leaves when it is done.
 */
export interface ReplicaMove {
  readonly source: string | null;
  readonly target: string;
  readonly reason: string;
}

export interface ActiveAssignment {
  readonly kind: 'active';
  readonly generation: number;
  /** Member ids, most preferred first; distinct. */
  readonly replicas: readonly string[];
  readonly moving: ReplicaMove | null;
  /** `move FRAGMENT --to NODE` (datum's Pinned): kept on this node while it is eligible. */
  readonly pinnedTo: string | null;
  /** The fence this generation was written under (datum's coordinator_node, plus incarnation and epoch). */
  readonly fence: Fence;
  /** Oldest first, at most ASSIGNMENT_HISTORY_ENTRIES_MAX. */
  readonly history: readonly HistoryEntry[];
}

/** The fragment has no replicas at `generation` (datum's AssignmentTombstone). */
export interface AssignmentTombstone {
  readonly kind: 'tombstone';
  readonly generation: number;
  readonly fence: Fence;
}

export type AssignmentEntry = ActiveAssignment | AssignmentTombstone;

export interface TableChange {
  readonly fence: Fence;
  readonly fragment: number;
  /** Its `fence` must be the change's. */
  readonly entry: AssignmentEntry;
}

export type RefusalReason =
  | 'malformed'
  | 'missing-fence'
  | 'non-current-coordinator'
  | 'stale-epoch'
  | 'epoch-conflict'
  | 'superseded-by-tombstone';

/** `status` is the admin surface's (datum's) status name, so a refusal crosses hops as an object. */
export interface Refusal {
  readonly outcome: 'refused';
  readonly reason: RefusalReason;
  readonly status: 'BadRequest' | 'Conflict';
  readonly message: string;
}

export type ApplyResult =
  | { readonly outcome: 'applied'; readonly previous: AssignmentEntry | undefined }
  /** Acknowledged without effect: an older or duplicate change (datum acknowledges these silently). */
  | { readonly outcome: 'ignored'; readonly why: string }
  | Refusal;

export function sameCoordinator(
  a: CoordinatorIdentity | undefined,
  b: CoordinatorIdentity | undefined,
): boolean {
  return a !== undefined && b !== undefined && a.id === b.id && a.incarnation === b.incarnation;
}

export function fenceCoordinator(fence: Fence): CoordinatorIdentity {
  return { id: fence.coordinatorId, incarnation: fence.incarnation };
}

export function sameFence(a: Fence, b: Fence): boolean {
  return a.coordinatorId === b.coordinatorId && a.incarnation === b.incarnation && a.epoch === b.epoch;
}

export function describeFence(fence: Fence): string {
  return `by ${fence.coordinatorId}@${fence.incarnation} e${fence.epoch}`;
}

/** The same elements in the same order. */
export function sameArrays<T>(a: readonly T[], b: readonly T[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export const sameReplicas: (a: readonly string[], b: readonly string[]) => boolean = sameArrays;

// ---- datum's ordering predicates (cluster.rs:3329–3482), over replica lists ----

/**
 * `remember_assignment`: a higher generation, or the same replicas refreshed by the same or the
 * current coordinator. Beyond datum: at an equal generation a later table epoch wins, because a
 * successor that rebuilt without seeing its predecessor's last write reuses that generation number
 * for its own decision, and every node must settle on the successor's.
 */
export function acceptsActive(
  existing: ActiveAssignment | undefined,
  candidate: ActiveAssignment,
  current: CoordinatorIdentity | undefined,
): boolean {
  if (existing === undefined || candidate.generation > existing.generation) return true;
  if (candidate.generation !== existing.generation) return false;
  if (candidate.fence.epoch > existing.fence.epoch) return true;
  const writer = fenceCoordinator(candidate.fence);
  return (
    sameReplicas(candidate.replicas, existing.replicas) &&
    (sameCoordinator(writer, fenceCoordinator(existing.fence)) || sameCoordinator(current, writer))
  );
}

/** `tombstone_dominates_assignment`: a higher generation, or the same one from the current coordinator. */
export function tombstoneDominates(
  tombstone: AssignmentTombstone,
  assigned: { readonly generation: number },
  current: CoordinatorIdentity | undefined,
): boolean {
  return (
    tombstone.generation > assigned.generation ||
    (tombstone.generation === assigned.generation &&
      sameCoordinator(current, fenceCoordinator(tombstone.fence)))
  );
}

/** `active_assignment_supersedes_tombstone`: strictly newer only. */
export function activeSupersedesTombstone(
  active: { readonly generation: number },
  tombstone: AssignmentTombstone,
): boolean {
  return active.generation > tombstone.generation;
}

/** `registry_observation_is_tombstoned`: a takeover report the tombstone outranks. */
export function observationIsTombstoned(
  tombstone: AssignmentTombstone,
  observed: { readonly generation: number },
): boolean {
  return !activeSupersedesTombstone(observed, tombstone);
}

/** `tombstone_supersedes`: a higher generation, or the same one from the same or the current coordinator. */
export function tombstoneSupersedes(
  candidate: AssignmentTombstone,
  existing: AssignmentTombstone,
  current: CoordinatorIdentity | undefined,
): boolean {
  return (
    candidate.generation > existing.generation ||
    (candidate.generation === existing.generation &&
      candidate.fence.coordinatorId !== '' &&
      (sameCoordinator(fenceCoordinator(candidate.fence), fenceCoordinator(existing.fence)) ||
        sameCoordinator(current, fenceCoordinator(candidate.fence))))
  );
}

/** `active_assignment_blocks_local_restart`: the table holds a newer generation, or the same one elsewhere. */
export function restartIsBlocked(
  restarted: { readonly generation: number; readonly replicas: readonly string[] },
  existing: ActiveAssignment,
): boolean {
  return (
    existing.generation > restarted.generation ||
    (existing.generation === restarted.generation && !sameReplicas(existing.replicas, restarted.replicas))
  );
}

function refusal(reason: RefusalReason, message: string): Refusal {
  return { outcome: 'refused', reason, status: reason === 'malformed' ? 'BadRequest' : 'Conflict', message };
}

export class AssignmentTable {
  readonly fragmentCount: number;
  #epoch = 0;
  /** The coordinator that owns `#epoch`; undefined only before the first change (epoch 0). */
  #epochCoordinator: CoordinatorIdentity | undefined = undefined;
  // Invariant: at most one entry per fragment in [0, fragmentCount), tombstones included.
  readonly #entries = new Map<number, AssignmentEntry>();
  /** `members()` as of the last change (every plan and majority check asks; changes are rare). */
  #members: readonly string[] | undefined = undefined;
  /** `entries()` as of the last change. */
  #sorted: ReadonlyArray<readonly [number, AssignmentEntry]> | undefined = undefined;

  constructor(fragmentCount: number) {
    if (!Number.isInteger(fragmentCount) || fragmentCount < 1 || fragmentCount > FRAGMENT_COUNT_MAX) {
      throw invalidInput(
        `assignment table: fragment count ${fragmentCount} outside 1..${FRAGMENT_COUNT_MAX}`,
      );
    }
    this.fragmentCount = fragmentCount;
  }

  get epoch(): number {
    return this.#epoch;
  }

  get epochCoordinator(): CoordinatorIdentity | undefined {
    return this.#epochCoordinator;
  }

  entry(fragment: number): AssignmentEntry | undefined {
    return this.#entries.get(fragment);
  }

  active(fragment: number): ActiveAssignment | undefined {
    const entry = this.#entries.get(fragment);
    return entry?.kind === 'active' ? entry : undefined;
  }

  /** Whether `member` is one of the fragment's serving replicas: listed, and not as a move's target. */
  listsServing(fragment: number, member: string): boolean {
    const entry = this.active(fragment);
    return entry?.replicas.includes(member) === true && entry.moving?.target !== member;
  }

  /** An entry for every fragment: a node that joined holds only those changed since, until it pulls the rest. */
  listsEveryFragment(): boolean {
    return this.#entries.size === this.fragmentCount;
  }

  /** Entries in fragment order (kept until the next change: a plan walks them at every interval). */
  entries(): ReadonlyArray<readonly [number, AssignmentEntry]> {
    this.#sorted ??= [...this.#entries].sort((a, b) => a[0] - b[0]);
    return this.#sorted;
  }

  /** Every member that holds a replica (a move's target included), sorted: the set the majority gate counts. */
  members(): string[] {
    if (this.#members === undefined) {
      const ids = new Set<string>();
      for (const entry of this.#entries.values()) {
        if (entry.kind === 'active') for (const id of entry.replicas) ids.add(id);
      }
      this.#members = [...ids].sort(compareIds);
    }
    return [...this.#members];
  }

  #set(fragment: number, entry: AssignmentEntry): void {
    this.#entries.set(fragment, entry);
    this.#members = undefined;
    this.#sorted = undefined;
  }

  /** The fence checks alone (`ensure_mutation_from_current_coordinator` plus the epoch); null when they pass. */
  checkFence(fence: Fence, current: CoordinatorIdentity | undefined): Refusal | null {
    if (fence.coordinatorId === '') {
      return refusal('missing-fence', 'assignment change is missing its coordinator fence');
    }
    if (!sameCoordinator(current, fenceCoordinator(fence))) {
      const now = current === undefined ? '<none>' : `${current.id}@${current.incarnation}`;
      return refusal(
        'non-current-coordinator',
        `assignment change from non-current coordinator: change=${fence.coordinatorId}@${fence.incarnation} current=${now}`,
      );
    }
    if (fence.epoch < this.#epoch) {
      return refusal(
        'stale-epoch',
        `assignment change at table epoch ${fence.epoch} is older than epoch ${this.#epoch}`,
      );
    }
    if (
      fence.epoch === this.#epoch &&
      this.#epochCoordinator !== undefined &&
      !sameCoordinator(this.#epochCoordinator, fenceCoordinator(fence))
    ) {
      const owner = this.#epochCoordinator;
      return refusal(
        'epoch-conflict',
        `table epoch ${fence.epoch} belongs to coordinator ${owner.id}@${owner.incarnation}, not ${fence.coordinatorId}@${fence.incarnation}`,
      );
    }
    return null;
  }

  /** Applies a received (or the coordinator's own) change; `current` is the coordinator this node's view names. */
  apply(change: TableChange, current: CoordinatorIdentity | undefined): ApplyResult {
    const malformed = changeProblem(change, this.fragmentCount);
    if (malformed !== null) return refusal('malformed', `malformed assignment change: ${malformed}`);
    const fenceRefusal = this.checkFence(change.fence, current);
    if (fenceRefusal !== null) return fenceRefusal;
    // The fence passed: this is the current coordinator, so its epoch is adopted whatever the entry's fate.
    this.#epoch = change.fence.epoch;
    this.#epochCoordinator = fenceCoordinator(change.fence);
    const { fragment, entry } = change;
    const existing = this.#entries.get(fragment);
    if (entry.kind === 'tombstone') {
      if (existing?.kind === 'active' && !tombstoneDominates(entry, existing, current)) {
        return {
          outcome: 'ignored',
          why: `tombstone generation ${entry.generation} does not outrank the assignment`,
        };
      }
      if (existing?.kind === 'tombstone' && !tombstoneSupersedes(entry, existing, current)) {
        return {
          outcome: 'ignored',
          why: `tombstone generation ${entry.generation} does not supersede the tombstone`,
        };
      }
      this.#set(fragment, entry);
      return { outcome: 'applied', previous: existing };
    }
    if (existing?.kind === 'tombstone' && !activeSupersedesTombstone(entry, existing)) {
      return refusal(
        'superseded-by-tombstone',
        `fragment ${fragment} generation ${entry.generation} does not supersede tombstone generation ${existing.generation} from coordinator ${existing.fence.coordinatorId}`,
      );
    }
    if (existing?.kind === 'active' && !acceptsActive(existing, entry, current)) {
      return {
        outcome: 'ignored',
        why: `generation ${entry.generation} does not supersede generation ${existing.generation}`,
      };
    }
    this.#set(fragment, entry);
    return { outcome: 'applied', previous: existing };
  }

  /**
   * The check at the point of effect (a worker adopting or dropping a replica, a move's cleanup):
   * the change is still the table's latest for its fragment, under the epoch the table holds now.
   */
  isCurrent(fragment: number, generation: number, fence: Fence): boolean {
    const entry = this.#entries.get(fragment);
    return (
      entry !== undefined &&
      entry.generation === generation &&
      fence.epoch === this.#epoch &&
      sameCoordinator(this.#epochCoordinator, fenceCoordinator(fence))
    );
  }

  /** Canonical text for tests and the status page. */
  describe(): string {
    const owner = this.#epochCoordinator;
    const lines = [
      `epoch ${this.#epoch} coordinator ${owner === undefined ? '-' : `${owner.id}@${owner.incarnation}`}`,
    ];
    for (const [fragment, entry] of this.entries()) {
      if (entry.kind === 'tombstone') {
        lines.push(`${fragment}: tombstone g${entry.generation} ${describeFence(entry.fence)}`);
        continue;
      }
      const moving =
        entry.moving === null ? '' : ` moving ${entry.moving.source ?? '-'}->${entry.moving.target}`;
      const pin = entry.pinnedTo === null ? '' : ` pin ${entry.pinnedTo}`;
      lines.push(
        `${fragment}: g${entry.generation} [${entry.replicas.join(' ')}]${moving}${pin} ${describeFence(entry.fence)}`,
      );
    }
    return lines.join('\n');
  }

  /** Installs a decoded or rebuilt table's state wholesale (a node's start, a takeover). */
  static from(
    fragmentCount: number,
    epoch: number,
    epochCoordinator: CoordinatorIdentity | undefined,
    entries: Iterable<readonly [number, AssignmentEntry]>,
  ): AssignmentTable {
    const table = new AssignmentTable(fragmentCount);
    table.#epoch = epoch;
    table.#epochCoordinator = epochCoordinator;
    for (const [fragment, entry] of entries) table.#set(fragment, entry);
    return table;
  }
}

/** Byte order of UTF-8, as placement.ts sorts members. */
export function compareIds(a: string, b: string): number {
  const shorter = Math.min(a.length, b.length);
  for (let i = 0; i < shorter; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    // Below the surrogates, UTF-16 order is UTF-8's; a surrogate (a pair past U+FFFF, or a lone
    // one, which UTF-8 encodes as U+FFFD) is left to the encoded bytes. Sorting a thousand members
    // encoded both ids at every comparison: milliseconds a plan.
    if (x >= 0xd800 || y >= 0xd800) return Buffer.compare(Buffer.from(a), Buffer.from(b));
    if (x !== y) return x - y;
  }
  return a.length - b.length;
}

/** Appends one history entry, dropping the oldest past ASSIGNMENT_HISTORY_ENTRIES_MAX. */
export function withHistory(history: readonly HistoryEntry[], next: HistoryEntry): HistoryEntry[] {
  const kept =
    history.length >= ASSIGNMENT_HISTORY_ENTRIES_MAX
      ? history.slice(history.length - ASSIGNMENT_HISTORY_ENTRIES_MAX + 1)
      : history.slice();
  kept.push(next);
  return kept;
}

// ---- Local effects: what this node must do about the replicas it hosts (datum's registry side) ----

/** A replica this node hosts, as its own store records it. */
export interface HostedReplica {
  readonly fragment: number;
  readonly generation: number;
  readonly replicas: readonly string[];
  readonly fence: Fence;
  readonly running: boolean;
}

export type LocalAction =
  /** Stop serving the fragment: the table gave it to others or ended it. */
  | { readonly kind: 'stop'; readonly fragment: number; readonly generation: number }
  /** Rewrite the hosted metadata to the table's generation and coordinator (no data moves). */
  | {
      readonly kind: 'refresh';
      readonly fragment: number;
      readonly generation: number;
      readonly fence: Fence;
    };

/**
 * Level-triggered, so a stop that failed is asked for again on the next call (datum retried from
 * the assignment it kept; here the table itself is the retry's memory).
 */
export function localReplicaActions(
  table: AssignmentTable,
  selfId: string,
  hosted: readonly HostedReplica[],
  current: CoordinatorIdentity | undefined,
): LocalAction[] {
  const actions: LocalAction[] = [];
  for (const replica of hosted) {
    const entry = table.entry(replica.fragment);
    if (entry === undefined) continue;
    if (entry.kind === 'tombstone') {
      if (!tombstoneDominates(entry, replica, current)) continue;
      if (replica.generation !== entry.generation || !sameFence(replica.fence, entry.fence)) {
        actions.push({
          kind: 'refresh',
          fragment: replica.fragment,
          generation: entry.generation,
          fence: entry.fence,
        });
      }
      if (replica.running)
        actions.push({ kind: 'stop', fragment: replica.fragment, generation: entry.generation });
      continue;
    }
    if (entry.replicas.includes(selfId)) {
      if (
        entry.generation > replica.generation ||
        (entry.generation === replica.generation && !sameFence(replica.fence, entry.fence))
      ) {
        actions.push({
          kind: 'refresh',
          fragment: replica.fragment,
          generation: entry.generation,
          fence: entry.fence,
        });
      }
    } else if (replica.running && restartIsBlocked(replica, entry)) {
      actions.push({ kind: 'stop', fragment: replica.fragment, generation: entry.generation });
    }
  }
  return actions;
}

// ---- Persistence: a plain JSON-able form, validated field by field on the way back ----

export const ASSIGNMENT_TABLE_FORMAT = 1;

export interface PersistedTable {
  format: number;
  fragmentCount: number;
  epoch: number;
  epochCoordinator: CoordinatorIdentity | null;
  entries: Array<{ fragment: number } & AssignmentEntry>;
}

export function encodeTable(table: AssignmentTable): PersistedTable {
  return {
    format: ASSIGNMENT_TABLE_FORMAT,
    fragmentCount: table.fragmentCount,
    epoch: table.epoch,
    epochCoordinator: table.epochCoordinator ?? null,
    entries: table.entries().map(([fragment, entry]) => ({ fragment, ...entry })),
  };
}

/** Decodes what encodeTable wrote (after JSON), refusing anything malformed with a TesseraError naming the field. */
export function decodeTable(value: unknown): AssignmentTable {
  const fail = (what: string): never => {
    throw invalidInput(`assignment table: ${what}`);
  };
  const obj = record(value) ?? fail('not an object');
  if (obj.format !== ASSIGNMENT_TABLE_FORMAT)
    fail(`format ${String(obj.format)} is not ${ASSIGNMENT_TABLE_FORMAT}`);
  const fragmentCount = obj.fragmentCount;
  if (!isCount(fragmentCount) || fragmentCount < 1 || fragmentCount > FRAGMENT_COUNT_MAX) {
    fail(`fragmentCount ${String(fragmentCount)} outside 1..${FRAGMENT_COUNT_MAX}`);
  }
  if (!isCount(obj.epoch)) fail('epoch is not a non-negative integer');
  const epochCoordinator =
    obj.epochCoordinator === null
      ? undefined
      : (identity(obj.epochCoordinator) ?? fail('epochCoordinator is not {id, incarnation}'));
  if ((obj.epoch === 0) !== (epochCoordinator === undefined)) fail('epoch and epochCoordinator disagree');
  if (!Array.isArray(obj.entries) || obj.entries.length > (fragmentCount as number))
    fail('entries is not a list of at most fragmentCount');
  const entries: Array<[number, AssignmentEntry]> = [];
  const seen = new Set<number>();
  for (const [index, raw] of (obj.entries as unknown[]).entries()) {
    const item = record(raw) ?? fail(`entries[${index}] is not an object`);
    const fragment = item.fragment;
    if (!isCount(fragment) || fragment >= (fragmentCount as number) || seen.has(fragment)) {
      fail(`entries[${index}].fragment ${String(fragment)} is out of range or repeated`);
    }
    seen.add(fragment as number);
    const { fragment: _, ...rest } = item;
    const entry = entryFrom(rest);
    let problem = entry === null ? 'not an assignment entry' : entryProblem(entry);
    if (entry !== null && entry.fence.epoch > (obj.epoch as number))
      problem = `written at epoch ${entry.fence.epoch}, after the table's`;
    if (problem !== null) fail(`entries[${index}]: ${problem}`);
    entries.push([fragment as number, entry as AssignmentEntry]);
  }
  return AssignmentTable.from(fragmentCount as number, obj.epoch as number, epochCoordinator, entries);
}

function record(value: unknown): Record<string, unknown> | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null;
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function isNodeId(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && Buffer.byteLength(value) <= NODE_ID_BYTES_MAX;
}

function isNodeList(value: unknown, max: number): value is string[] {
  return (
    Array.isArray(value) &&
    value.length <= max &&
    value.every(isNodeId) &&
    new Set(value).size === value.length
  );
}

function fenceFrom(value: unknown): Fence | null {
  const obj = record(value);
  if (obj === null || !isNodeId(obj.coordinatorId) || !isCount(obj.incarnation) || !isCount(obj.epoch))
    return null;
  return { coordinatorId: obj.coordinatorId, incarnation: obj.incarnation, epoch: obj.epoch };
}

function identity(value: unknown): CoordinatorIdentity | null {
  const obj = record(value);
  if (obj === null || !isNodeId(obj.id) || !isCount(obj.incarnation)) return null;
  return { id: obj.id, incarnation: obj.incarnation };
}

function historyEntry(value: unknown): HistoryEntry | null {
  const obj = record(value);
  if (obj === null || !isCount(obj.generation) || !isCount(obj.timestampMs)) return null;
  if (
    !isNodeList(obj.from, REPLICAS_PER_FRAGMENT_MAX + 1) ||
    !isNodeList(obj.to, REPLICAS_PER_FRAGMENT_MAX + 1)
  )
    return null;
  if (typeof obj.reason !== 'string' || !isReason(obj.reason)) return null;
  return {
    generation: obj.generation,
    from: obj.from,
    to: obj.to,
    reason: obj.reason,
    timestampMs: obj.timestampMs,
  };
}

function entryFrom(obj: Record<string, unknown>): AssignmentEntry | null {
  const fence = fenceFrom(obj.fence);
  if (fence === null || !isCount(obj.generation)) return null;
  if (obj.kind === 'tombstone') return { kind: 'tombstone', generation: obj.generation, fence };
  if (obj.kind !== 'active' || !Array.isArray(obj.history)) return null;
  if (!isNodeList(obj.replicas, REPLICAS_PER_FRAGMENT_MAX + 1)) return null;
  const history = obj.history.map(historyEntry);
  if (history.some((h) => h === null)) return null;
  let moving: ReplicaMove | null = null;
  if (obj.moving !== null) {
    const m = record(obj.moving);
    if (m === null || !isNodeId(m.target) || !(m.source === null || isNodeId(m.source))) return null;
    if (typeof m.reason !== 'string' || !isReason(m.reason)) return null;
    moving = { source: m.source, target: m.target, reason: m.reason };
  }
  if (!(obj.pinnedTo === null || isNodeId(obj.pinnedTo))) return null;
  return {
    kind: 'active',
    generation: obj.generation,
    replicas: obj.replicas,
    moving,
    pinnedTo: obj.pinnedTo,
    fence,
    history: history as HistoryEntry[],
  };
}

const REASON_WORDS = new Set(['bootstrap', 'rebalance', 'move', 'reissue']);
const REASON_PREFIXES = ['join:', 'leave:', 'node_down:'];

/** One of the history reasons: a fixed word, or a word and a node id. */
export function isReason(reason: string): boolean {
  if (Buffer.byteLength(reason) > ASSIGNMENT_REASON_BYTES_MAX) return false;
  if (REASON_WORDS.has(reason)) return true;
  const prefix = REASON_PREFIXES.find((p) => reason.startsWith(p));
  return prefix !== undefined && isNodeId(reason.slice(prefix.length));
}

/** What is wrong with an entry's invariants (beyond its field types), or null. */
function entryProblem(entry: AssignmentEntry): string | null {
  if (!isCount(entry.generation) || entry.generation < 1) return `generation ${entry.generation} is below 1`;
  if (entry.fence.epoch < 1) return `written at epoch ${entry.fence.epoch}, before any coordinator`;
  if (entry.kind === 'tombstone') return null;
  const limit = REPLICAS_PER_FRAGMENT_MAX + (entry.moving === null ? 0 : 1);
  if (!isNodeList(entry.replicas, limit) || entry.replicas.length < 1) {
    return `replicas [${entry.replicas.join(' ')}] are not 1..${limit} distinct node ids`;
  }
  if (entry.moving !== null) {
    const { source, target } = entry.moving;
    if (entry.replicas[entry.replicas.length - 1] !== target)
      return `move target ${target} is not the last replica`;
    if (source !== null && (source === target || !entry.replicas.includes(source)))
      return `move source ${source} is not a replica`;
  }
  if (entry.history.length > ASSIGNMENT_HISTORY_ENTRIES_MAX)
    return `history longer than ${ASSIGNMENT_HISTORY_ENTRIES_MAX}`;
  return null;
}

function changeProblem(change: TableChange, fragmentCount: number): string | null {
  const { fence, fragment, entry } = change;
  if (!Number.isInteger(fragment) || fragment < 0 || fragment >= fragmentCount)
    return `fragment ${fragment} outside 0..${fragmentCount - 1}`;
  if (!isCount(fence.epoch) || fence.epoch < 1 || !isCount(fence.incarnation))
    return 'fence epoch or incarnation is not a count (epoch from 1)';
  if (fence.coordinatorId !== '' && !sameFence(entry.fence, fence)) {
    return `entry carries fence ${describeFence(entry.fence)}, the change ${describeFence(fence)}`;
  }
  return entryProblem(entry);
}
