// The placement driver's core on every node (actordb-node-part-a.md §7.2–7.6; DESIGN.md
// "Placement"): it reconciles the coordinator's table with the fragments this node holds, one
// state per fragment — Serving, Bootstrapping, Draining, Stopped — and says what to do about each:
// hold a fragment (open it and replicate to its replicas), verify a gained copy against a serving
// replica, tell the coordinator it is ready, serve, hand a lost copy over and drop it. Events in,
// actions out; the driver (src/main/mesh/placement-driver.ts) carries them out and reports back.
//
// Rules:
// - A transition is marked before its action leaves, and every result names the table generation
//   it was started for: a result for another generation is ignored, so no tick starts work twice
//   and the ABA case P→Q→P never publishes work done for the first P (generations only grow).
// - One step at a time per fragment: a table change while a step runs waits for its result (which
//   then counts for nothing, but a drop: the copy is gone) before the next step starts, so a stale
//   hold never lands after a newer one and nothing is dropped while an earlier step still uses it.
// - Gain: a fragment whose table entry lists this node as the move's target is Bootstrapping: held
//   (routed here, replicated to, not serving), then verified by a complete anti-entropy round
//   against a serving replica started after the hold, with the entry unchanged; only then does the
//   node tell the coordinator it is ready (again on every resend interval until the coordinator
//   finishes the move). The finished move lists it as a serving replica: Serving.
// - A fragment the table lists this node as a serving replica of (not a move's target) is served
//   once open: at bootstrap every copy is empty, and after a restart the copy is the node's own.
// - Loss: a served fragment the table no longer lists this node for is Draining: it stops serving
//   at once, hands its copy to every replica the table lists (each pulls it whole, and acknowledges
//   every write at stable), and only then is dropped. The whole copy, not only what its senders
//   queued: it may hold writes no one else has — acknowledged here just before a crash and never
//   sent, or taken on the side of a partition the others marked it Down from. No replica to hand to, or one that does not drain, keeps it Draining — warned about
//   every drain-warn interval, never dropped on a timer; a handoff that fails again waits longer
//   before the next try (PLACEMENT_DRAIN_RETRY_BACKOFF_MAX), since each has every target pull it
//   whole. A copy that never served (a cancelled gain) holds nothing only it has, and is dropped at once.
// - A fragment listed again while Draining goes back through the gain (its copy is verified anew).
// - A node that handed everything over and exits the cluster gains nothing more: a coordinator
//   that has not heard it leave may still name it a move's target, and a copy it took then would
//   leave with it. The move waits until the coordinator sees it go and cancels it.

import { assert } from './assert.js';
import type { ActiveAssignment, AssignmentTable } from './assignment-table.js';
import { PLACEMENT_DRAIN_RETRY_BACKOFF_MAX } from './limits.js';

export type FragmentPlacementState = 'Serving' | 'Bootstrapping' | 'Draining' | 'Stopped';

/** What is in flight for a fragment; at most one at a time. */
export type PlacementStep = 'hold' | 'verify' | 'drain' | 'drop';

export interface PlacementMachineConfig {
  selfId: string;
  fragmentCount: number;
  /** A failed hold, verify or drop is tried again after this long. */
  retryMs: number;
  /** A bootstrapped fragment tells the coordinator it is ready again this often, until it is served. */
  readyResendMs: number;
  /** A fragment kept Draining is warned about this often (`--drain-warn-interval`). */
  drainWarnIntervalMs: number;
}

export type PlacementEvent =
  /** The fragments this node's stores hold at start (before any table is applied). */
  | { kind: 'start'; held: readonly number[]; nowMs: number }
  /** The table this node routes by changed (`fragments`: the entries that changed; all at first). */
  | { kind: 'table'; table: AssignmentTable; fragments: readonly number[]; nowMs: number }
  /** A step's outcome, for the generation it was started for. */
  | {
      kind: 'done';
      fragment: number;
      step: PlacementStep;
      generation: number;
      ok: boolean;
      detail: string;
      nowMs: number;
    }
  | { kind: 'tick'; nowMs: number }
  /** This node handed every fragment over and exits the cluster: it takes no copy from now on. */
  | { kind: 'exit'; nowMs: number };

export type PlacementAction =
  /** Open the fragment if needed and replicate it to `replicas` (this node among them) only. */
  | { kind: 'hold'; fragment: number; generation: number; replicas: readonly string[] }
  /** A complete anti-entropy round against one of `sources` (serving replicas), started from now. */
  | { kind: 'verify'; fragment: number; generation: number; sources: readonly string[] }
  /** Tell the coordinator this node holds a verified copy of the fragment at `generation`. */
  | { kind: 'ready'; fragment: number; generation: number }
  /** Serve the fragment's requests here (or stop: forward them to a serving replica). */
  | { kind: 'serve'; fragment: number; serving: boolean }
  /**
   * Replicate to `targets` only, and hand the copy over to them — each pulls it whole, then every
   * write is acknowledged at stable — before the copy may go.
   */
  | { kind: 'drain'; fragment: number; generation: number; targets: readonly string[] }
  /** Remove the copy. */
  | { kind: 'drop'; fragment: number; generation: number }
  | { kind: 'warn'; fragment: number; message: string; fields: Record<string, unknown> };

/** One fragment as this node holds it. */
export interface FragmentPlacement {
  readonly fragment: number;
  readonly state: FragmentPlacementState;
  /** The table generation the node works toward (0: none yet). */
  readonly generation: number;
  /** The step in flight, or null. */
  readonly step: PlacementStep | null;
  /** Verified at `generation` (Bootstrapping only). */
  readonly verified: boolean;
  readonly sinceMs: number;
  /** Why the fragment waits, when it does (a failed step, a drain without targets). */
  readonly waiting: string;
}

interface Slot {
  state: FragmentPlacementState;
  generation: number;
  step: PlacementStep | null;
  /** The generation the step in flight was started for (it may be behind `generation`). */
  stepGeneration: number;
  /** The node holds the fragment at `generation` (its hold step succeeded). */
  held: boolean;
  /** The fragment is open in a worker (held at some generation, or by the store at start) until dropped. */
  opened: boolean;
  verified: boolean;
  /** The driver was told to serve it (the last `serve` action said so). */
  announced: boolean;
  /** The copy served writes since its last handoff, so it may hold some only it has: dropping it needs a handoff. */
  authoritative: boolean;
  sinceMs: number;
  retryAtMs: number;
  /** Handoffs at `generation` that failed in a row: each waits longer before the next. */
  drainFailures: number;
  readyAtMs: number;
  warnAtMs: number;
  waiting: string;
}

export interface PlacementCounters {
  gained: number;
  published: number;
  handedOver: number;
  dropped: number;
  stepsFailed: number;
  staleResults: number;
  /** Table entries that listed this node after it exited the cluster, each declined once. */
  declined: number;
}

export class PlacementMachine {
  private readonly slots: (Slot | undefined)[];
  private table: AssignmentTable | undefined;
  private nowMs = 0;
  /** Set once this node exits the cluster (the `exit` event): it gains nothing more. */
  private exited = false;
  private readonly outbox: PlacementAction[] = [];
  readonly counters: PlacementCounters = {
    gained: 0,
    published: 0,
    handedOver: 0,
    dropped: 0,
    stepsFailed: 0,
    staleResults: 0,
    declined: 0,
  };

  constructor(private readonly config: PlacementMachineConfig) {
    assert(
      config.retryMs > 0 && config.readyResendMs > 0 && config.drainWarnIntervalMs > 0,
      'intervals must be > 0',
    );
    this.slots = new Array(config.fragmentCount).fill(undefined);
  }

  step(event: PlacementEvent): void {
    this.nowMs = Math.max(this.nowMs, event.nowMs);
    switch (event.kind) {
      case 'start':
        for (const fragment of event.held) this.onPreloaded(fragment);
        return;
      case 'table':
        this.table = event.table;
        for (const fragment of event.fragments) this.reconcile(fragment);
        // Preloaded fragments the table does not mention are reconciled once a table is there.
        for (let f = 0; f < this.slots.length; f++) {
          if (this.slots[f]?.generation === 0) this.reconcile(f);
        }
        return;
      case 'done':
        return this.onDone(event.fragment, event.step, event.generation, event.ok, event.detail);
      case 'tick':
        return this.onTick();
      case 'exit':
        this.exited = true;
        return;
    }
  }

  takeActions(into: PlacementAction[]): void {
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  /** When the next tick has something to do (a retry, a resend, a warning); Infinity when nothing. */
  nextWakeMs(): number {
    let wake = Number.POSITIVE_INFINITY;
    for (const slot of this.slots) {
      if (slot === undefined) continue;
      if (slot.step === null && slot.retryAtMs > 0) wake = Math.min(wake, slot.retryAtMs);
      if (slot.state === 'Bootstrapping' && slot.verified) wake = Math.min(wake, slot.readyAtMs);
      if (slot.state === 'Draining') wake = Math.min(wake, slot.warnAtMs);
    }
    return Number.isFinite(wake) ? Math.max(wake, this.nowMs) : wake;
  }

  /** The fragment's state, or undefined when this node neither holds nor wants it. */
  fragment(fragment: number): FragmentPlacement | undefined {
    const slot = this.slots[fragment];
    if (slot === undefined) return undefined;
    return {
      fragment,
      state: slot.state,
      generation: slot.generation,
      step: slot.step,
      verified: slot.verified,
      sinceMs: slot.sinceMs,
      waiting: slot.waiting,
    };
  }

  /** Every fragment this node holds or works on, by fragment. */
  fragments(): FragmentPlacement[] {
    const all: FragmentPlacement[] = [];
    for (let f = 0; f < this.slots.length; f++) {
      const view = this.fragment(f);
      if (view !== undefined && view.state !== 'Stopped') all.push(view);
    }
    return all;
  }

  /** Whether this node serves the fragment's requests itself now. */
  serves(fragment: number): boolean {
    return this.slots[fragment]?.announced === true;
  }

  // ---- Events ----

  /** A fragment the store held at start: held (at no generation yet) and served, as the node served it before. */
  private onPreloaded(fragment: number): void {
    assert(this.table === undefined, 'preloaded fragments come before any table');
    const slot = this.slotOf(fragment);
    slot.held = true;
    slot.opened = true;
    slot.announced = true;
    slot.authoritative = true;
    this.enter(slot, 'Serving');
  }

  private onDone(
    fragment: number,
    step: PlacementStep,
    generation: number,
    ok: boolean,
    detail: string,
  ): void {
    const slot = this.slots[fragment];
    if (slot === undefined || slot.step !== step || slot.stepGeneration !== generation) {
      this.counters.staleResults++;
      return;
    }
    slot.step = null;
    if (generation !== slot.generation && step !== 'drop') {
      // Started for an earlier generation: it counts for nothing now (a held copy stays open).
      this.counters.staleResults++;
      if (ok && step === 'hold') slot.opened = true;
      return this.reconcile(fragment);
    }
    if (!ok) {
      this.counters.stepsFailed++;
      slot.waiting = `${step} failed: ${detail}`;
      // Each try of a handoff has every target pull the whole copy: one held up waits longer each time.
      const backoff =
        step === 'drain' ? Math.min(2 ** slot.drainFailures++, PLACEMENT_DRAIN_RETRY_BACKOFF_MAX) : 1;
      slot.retryAtMs = this.nowMs + this.config.retryMs * backoff;
      if (step === 'drain') return this.warnDraining(fragment, slot);
      return;
    }
    slot.waiting = '';
    slot.retryAtMs = 0;
    slot.drainFailures = 0;
    switch (step) {
      case 'hold':
        slot.held = true;
        slot.opened = true;
        break;
      case 'verify':
        slot.verified = true;
        slot.readyAtMs = this.nowMs;
        break;
      case 'drain':
        this.counters.handedOver++;
        slot.authoritative = false;
        break;
      case 'drop':
        this.counters.dropped++;
        slot.held = false;
        slot.opened = false;
        slot.authoritative = false;
        this.enter(slot, 'Stopped');
        break;
    }
    this.reconcile(fragment);
  }

  private onTick(): void {
    for (let f = 0; f < this.slots.length; f++) {
      const slot = this.slots[f];
      if (slot === undefined || slot.state === 'Stopped') continue;
      if (slot.step === null && slot.retryAtMs > 0 && this.nowMs >= slot.retryAtMs) {
        slot.retryAtMs = 0;
        this.reconcile(f);
      }
      if (
        slot.state === 'Bootstrapping' &&
        slot.verified &&
        slot.step === null &&
        this.nowMs >= slot.readyAtMs
      ) {
        this.sendReady(f, slot);
      }
      if (slot.state === 'Draining' && this.nowMs >= slot.warnAtMs) this.warnDraining(f, slot);
    }
  }

  // ---- Reconciliation: level-triggered, from the table entry and the slot ----

  private reconcile(fragment: number): void {
    const table = this.table;
    // A fragment the table has no entry for (no table yet: it is empty until the first coordinator
    // writes one) keeps what this node does with it; a tombstone ends it.
    if (table === undefined || table.entry(fragment) === undefined) return;
    const entry = table.active(fragment);
    const self = this.config.selfId;
    const slot = this.slots[fragment];
    if (entry === undefined || !entry.replicas.includes(self)) {
      if (slot === undefined || slot.state === 'Stopped') return;
      return this.lose(fragment, slot, entry);
    }
    if (this.exited && (slot === undefined || slot.state === 'Stopped')) return this.decline(fragment, entry);
    const target = entry.moving?.target === self;
    this.gain(fragment, this.slotOf(fragment), entry, target);
  }

  /** The table lists this node after it exited the cluster: it takes nothing, and says so once per generation. */
  private decline(fragment: number, entry: ActiveAssignment): void {
    const slot = this.slotOf(fragment);
    if (slot.generation === entry.generation) return;
    slot.generation = entry.generation;
    slot.waiting = 'this node exits the cluster: it takes no new copy';
    this.counters.declined++;
    this.outbox.push({
      kind: 'warn',
      fragment,
      message: 'declined a fragment copy: this node exits the cluster',
      fields: { fragment, generation: entry.generation, reason: slot.waiting },
    });
  }

  /** The table lists this node: hold, then (as a move's target) verify and report, else serve. */
  private gain(fragment: number, slot: Slot, entry: ActiveAssignment, target: boolean): void {
    // A copy being dropped finishes its drop first; it is gained anew from Stopped.
    if (slot.step === 'drop') return;
    if (slot.generation !== entry.generation) {
      // A new generation: work done for the previous one does not count (publish after verification
      // with the entry unchanged), and the replicas to replicate to may have changed.
      if (slot.state === 'Stopped' || slot.state === 'Draining') this.counters.gained++;
      slot.generation = entry.generation;
      slot.held = false;
      slot.verified = false;
      slot.retryAtMs = 0;
      slot.drainFailures = 0;
    }
    if (!target) {
      if (slot.state === 'Bootstrapping') this.counters.published++;
      if (slot.state !== 'Serving') this.enter(slot, 'Serving');
      if (slot.step === null && !slot.held && slot.retryAtMs === 0) this.hold(fragment, slot, entry);
      // Served once open — while a hold for a new generation runs too: the node served it before,
      // or the coordinator published its verified copy. A copy opened only now is a bootstrap
      // (every copy is empty), or the table's word that this node serves it.
      if (slot.opened) this.announce(fragment, slot, true);
      return;
    }
    if (slot.state !== 'Bootstrapping') {
      this.announce(fragment, slot, false);
      this.enter(slot, 'Bootstrapping');
    }
    if (slot.step !== null || slot.retryAtMs > 0) return;
    if (!slot.held) return this.hold(fragment, slot, entry);
    if (!slot.verified) {
      // The move's source first: the copy is verified against it before the move may finish, so
      // its handoff finds this copy verified under its replication and needs no round (cluster.ts
      // serveAbsorb); the bulk of the copy then comes from the node giving it up. Then the table's order.
      const others = entry.replicas.filter((id) => id !== this.config.selfId);
      const source = entry.moving?.source ?? null;
      const sources =
        source !== null && others.includes(source)
          ? [source, ...others.filter((id) => id !== source)]
          : others;
      if (sources.length > 0) {
        this.begin(slot, 'verify');
        this.outbox.push({ kind: 'verify', fragment, generation: slot.generation, sources });
        return;
      }
      // No other replica: nothing to copy from, nothing to verify against.
      slot.verified = true;
      slot.readyAtMs = this.nowMs;
    }
    if (this.nowMs >= slot.readyAtMs) this.sendReady(fragment, slot);
  }

  /** The table no longer lists this node: stop serving, hand over, drop. */
  private lose(fragment: number, slot: Slot, entry: ActiveAssignment | undefined): void {
    const generation = this.table?.entry(fragment)?.generation ?? slot.generation;
    if (slot.state !== 'Draining') {
      this.announce(fragment, slot, false);
      this.enter(slot, 'Draining');
      slot.warnAtMs = this.nowMs + this.config.drainWarnIntervalMs;
    }
    if (slot.generation !== generation) {
      slot.generation = generation;
      slot.retryAtMs = 0;
      slot.drainFailures = 0;
    }
    if (slot.step !== null || slot.retryAtMs > 0) return;
    if (!slot.authoritative) {
      this.begin(slot, 'drop');
      this.outbox.push({ kind: 'drop', fragment, generation });
      return;
    }
    const targets = entry === undefined ? [] : entry.replicas.filter((id) => id !== this.config.selfId);
    if (targets.length === 0) {
      slot.waiting = 'no replacement replica can certify the handoff';
      return;
    }
    this.begin(slot, 'drain');
    this.outbox.push({ kind: 'drain', fragment, generation, targets });
  }

  private announce(fragment: number, slot: Slot, serving: boolean): void {
    if (serving) slot.authoritative = true;
    if (slot.announced === serving) return;
    slot.announced = serving;
    this.outbox.push({ kind: 'serve', fragment, serving });
  }

  /** Marks `step` in flight for the slot's generation, before its action leaves. */
  private begin(slot: Slot, step: PlacementStep): void {
    slot.step = step;
    slot.stepGeneration = slot.generation;
  }

  private hold(fragment: number, slot: Slot, entry: ActiveAssignment): void {
    this.begin(slot, 'hold');
    this.outbox.push({ kind: 'hold', fragment, generation: slot.generation, replicas: entry.replicas });
  }

  private sendReady(fragment: number, slot: Slot): void {
    slot.readyAtMs = this.nowMs + this.config.readyResendMs;
    this.outbox.push({ kind: 'ready', fragment, generation: slot.generation });
  }

  private warnDraining(fragment: number, slot: Slot): void {
    slot.warnAtMs = this.nowMs + this.config.drainWarnIntervalMs;
    this.outbox.push({
      kind: 'warn',
      fragment,
      message: 'fragment remains Draining: its handoff is not certified yet',
      fields: {
        fragment,
        generation: slot.generation,
        since: slot.sinceMs,
        reason: slot.waiting || 'draining',
      },
    });
  }

  private enter(slot: Slot, state: FragmentPlacementState): void {
    slot.state = state;
    slot.sinceMs = this.nowMs;
  }

  private slotOf(fragment: number): Slot {
    assert(fragment >= 0 && fragment < this.slots.length, `fragment ${fragment} out of range`);
    let slot = this.slots[fragment];
    if (slot === undefined) {
      slot = {
        state: 'Stopped',
        generation: 0,
        step: null,
        stepGeneration: 0,
        held: false,
        opened: false,
        verified: false,
        announced: false,
        authoritative: false,
        sinceMs: this.nowMs,
        retryAtMs: 0,
        drainFailures: 0,
        readyAtMs: 0,
        warnAtMs: 0,
        waiting: '',
      };
      this.slots[fragment] = slot;
    }
    return slot;
  }
}
