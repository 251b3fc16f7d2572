// The placement coordinator as a state machine on every node (datum-agent.md §2.2, §3; DESIGN.md
// "Placement"): events in (this node's membership view, messages from peers, ticks), actions out
// (messages, the table to persist, routing to refresh, log lines). The rules are coordinator.ts's
// and assignment-table.ts's; this machine decides when each applies.
//
// - Every node names the coordinator from its own view (lowest id among Up, reachable members).
//   The coordinator acts only while it reaches a majority of the table's members (before any
//   table: of the members it started with), so a minority side never changes placement; and it
//   makes no change after which it would not (one taking a reached member out of the table waits).
// - A node that becomes coordinator takes over: it proposes an epoch above every one it knows and
//   asks every live member for its last accepted table and a promise (Paxos's prepare): a member
//   promises an epoch only above any it holds or promised, to one coordinator, persists the promise
//   before answering, and from then on accepts no change below that epoch nor at it from another
//   coordinator. The coordinator adopts datum's fail-closed rebuild (coordinator.ts
//   rebuildFromReports) at the promised epoch once every live member has promised; a refusal names
//   the epoch to outbid. Live members include a majority of the table's, so two coordinators taking
//   over at once share a member that promises only one of them: no epoch has two coordinators. A cluster without any table
//   is bootstrapped in that epoch: from the placement the nodes were started with (static
//   `--peers`), else by the planner.
// - Changes go to every member; a receiver applies each with the fences of assignment-table.ts,
//   naming the coordinator from its own view, and persists what it applied before routing by it.
//   A refused change is logged and dropped: the coordinator's digest, sent to every member every
//   few seconds, makes a member that missed or refused changes pull the whole table once their
//   views agree. A member that refused a coordinator its view did not name yet (a coordinator's new
//   incarnation that took over before the member heard of it) pulls as soon as its view names it,
//   and asks to exchange its membership view with that coordinator at once (`sync-view`): gossip
//   that missed it would otherwise reach it only at the next push-pull.
// - A seed's word that a member asks to join back without its earlier run's data (`lost-copies`)
//   drops the member from every list that keeps another whole copy (coordinator.ts
//   dropLostCopies); the planner places nothing on it until its new run is in the view.

import { assert } from './assert.js';
import {
  type ActiveAssignment,
  AssignmentTable,
  type CoordinatorIdentity,
  encodeTable,
  type Fence,
  fenceCoordinator,
  type PersistedTable,
  sameCoordinator,
  type TableChange,
} from './assignment-table.js';
import {
  bootstrapChanges,
  cancelMove,
  chooseCoordinator,
  dropLostCopies,
  finishMove,
  type MemberView,
  type MoveLimits,
  mayChangeTable,
  pinFragment,
  planMoves,
  rankForPlanning,
  reachesMajority,
  reachesMajorityAfter,
  rebuildFromReports,
  reissueAbove,
  servingTransfers,
  startMove,
  takeoverReporters,
  transferServing,
} from './coordinator.js';
import {
  COORDINATOR_VIEW_SYNC_INTERVAL_MS,
  PLACEMENT_BLOCKED_LISTED_MAX,
  PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX,
  RENDEZVOUS_SLICE_PAUSE_MS,
  RENDEZVOUS_WEIGHS_PER_SLICE,
} from './limits.js';

/** A member's promise not to accept changes below `epoch`, nor at it from another coordinator. */
export interface EpochPromise {
  readonly epoch: number;
  readonly to: CoordinatorIdentity;
}

/** Placement messages between nodes; tables travel in their persisted form (assignment-table.ts). */
export type PlacementMessage =
  /** A coordinator taking over proposes `epoch`. */
  | { kind: 'report-request'; from: string; incarnation: number; epoch: number }
  /** The member's table and promise of `epoch`; or, when `refused`, the epoch to outbid. */
  | { kind: 'report'; from: string; epoch: number; refused: boolean; table: PersistedTable }
  /** Entries of the coordinator's table (all of them for a pull), each under its own fence. */
  | { kind: 'changes'; from: string; table: PersistedTable }
  | { kind: 'digest'; from: string; digest: string }
  | { kind: 'pull'; from: string }
  /** A move's target holds a verified copy of `fragment` at `generation`: the move may finish. */
  | { kind: 'ready'; from: string; fragment: number; generation: number }
  /**
   * The member ignored the coordinator's entry of `fragment`: it holds `generation`, higher, from an
   * older coordinator's change that no majority took. The coordinator reissues its entry above it.
   */
  | { kind: 'ahead'; from: string; fragment: number; generation: number }
  /**
   * `member` asks to join at `incarnation` without its earlier run's data (the memory store, a lost
   * data directory), through the seed `from`, while the table still lists it: the coordinator drops
   * its lost copies (coordinator.ts dropLostCopies), so the seed may admit it empty.
   */
  | { kind: 'lost-copies'; from: string; member: string; incarnation: number };

export type CoordinatorEvent =
  | { kind: 'view'; view: readonly MemberView[]; nowMs: number }
  /** `table` is the decoded table of a report or changes message (the driver decodes and checks it). */
  | { kind: 'message'; message: PlacementMessage; table: AssignmentTable | undefined; nowMs: number }
  | { kind: 'tick'; nowMs: number }
  /** `move FRAGMENT --to NODE` reached this node (the driver answers with `lastAnswer`). */
  | { kind: 'pin'; fragment: number; node: string; nowMs: number };

/** What the coordinator said to the last operator request, in the admin surface's status names. */
export interface CoordinatorAnswer {
  readonly status: 'Ok' | 'BadRequest' | 'NotFound' | 'Conflict';
  readonly message: string;
}

export type CoordinatorAction =
  | { kind: 'send'; to: string; message: PlacementMessage }
  /** Save the table and the promise before anything that follows (routing by it, answering). */
  | { kind: 'persist'; table: AssignmentTable; promise: EpochPromise | undefined }
  | { kind: 'table-changed'; fragments: number[] }
  | { kind: 'coordinator-changed'; coordinator: CoordinatorIdentity | undefined; epoch: number }
  /**
   * This node refused changes from `member`, a coordinator its membership view does not name: one
   * of the two views is behind. Exchange the whole view with it (a membership push-pull).
   */
  | { kind: 'sync-view'; member: string }
  | { kind: 'log'; level: 'info' | 'warn'; message: string };

export interface CoordinatorMachineConfig {
  selfId: string;
  fragmentCount: number;
  replicas: number;
  /** Replica lists (node ids) the nodes were started with (static `--peers`); empty when none. */
  initialPlacement: ReadonlyArray<readonly string[]>;
  /** The members the node was started with: the majority gate's set before any table exists. */
  initialMembers: readonly string[];
  /**
   * Whether this node may bootstrap the first table when every live member reports none: not a
   * node that joins a running cluster, which may see only itself (or other joiners) for a while.
   */
  mayBootstrap: boolean;
  /** The table this node accepted last (its data directory), or undefined. */
  restored: AssignmentTable | undefined;
  /** The promise this node made last (its data directory), or undefined. */
  restoredPromise: EpochPromise | undefined;
  reportRetryMs: number;
  digestIntervalMs: number;
  /**
   * Whether the coordinator starts replica moves (join, leave, Down, pins, rebalancing) by the
   * planner, and how many at once per node; undefined: it keeps the table as it is.
   */
  moves: MoveLimits | undefined;
  /** The planner runs again this often while moves wait (a limit, a member unreachable). */
  planIntervalMs: number;
  /** Rendezvous weighs per slice before a plan that must rank (RENDEZVOUS_WEIGHS_PER_SLICE unless given). */
  weighsPerSlice?: number;
}

export type CoordinatorRole = 'follower' | 'taking-over' | 'coordinator';

export interface CoordinatorCounters {
  changesApplied: number;
  changesIgnored: number;
  changesRefused: number;
  takeovers: number;
  pulls: number;
  movesStarted: number;
  movesFinished: number;
  movesCancelled: number;
  /** Entries reissued above a generation a member held from an older epoch (`ahead`). */
  reissues: number;
  /** Fragments whose serving went to another of their replicas to even out who serves. */
  servingTransfers: number;
  /** Replicas dropped from the table because their member came back without its data. */
  lostCopiesDropped: number;
}

export class CoordinatorMachine {
  private table: AssignmentTable;
  private view: readonly MemberView[] = [];
  private coordinator: CoordinatorIdentity | undefined;
  private roleNow: CoordinatorRole = 'follower';
  private readonly reports = new Map<string, AssignmentTable>();
  /** The planner's blocked reasons as last logged (one per line; empty: not blocked). */
  private blockedBefore = '';
  private promise: EpochPromise | undefined;
  /** The epoch this node proposes while taking over, and as which identity. */
  private proposal = 0;
  private proposer: CoordinatorIdentity | undefined;
  private reportRetryAtMs = Number.POSITIVE_INFINITY;
  private nextDigestAtMs = Number.POSITIVE_INFINITY;
  private lastRefusal = '';
  /** The last reason a takeover with every report in hand waited, logged once until it changes. */
  private lastTakeoverWait = '';
  /** The last change held back because it would cost this coordinator its majority, logged once. */
  private lastChangeWait = '';
  /**
   * The coordinator whose changes this node refused last because its view named another (at start,
   * the coordinator's earlier incarnation): once the view names it, this node pulls its table rather
   * than wait for its next digest.
   */
  private refusedCoordinator: CoordinatorIdentity | undefined;
  /** When this node last asked to exchange views with each member whose changes it refused. */
  private readonly viewSyncedAtMs = new Map<string, number>();
  private nowMs = 0;
  private readonly outbox: CoordinatorAction[] = [];
  readonly counters: CoordinatorCounters = {
    changesApplied: 0,
    changesIgnored: 0,
    changesRefused: 0,
    takeovers: 0,
    pulls: 0,
    movesStarted: 0,
    movesFinished: 0,
    movesCancelled: 0,
    reissues: 0,
    servingTransfers: 0,
    lostCopiesDropped: 0,
  };
  private nextPlanAtMs = Number.POSITIVE_INFINITY;
  /**
   * Serving transfers wait a plan interval after the table settled and after the batch before, so
   * each member a batch hands serving to has verified its copy against the replica serving it now
   * (the node predicts the batch: cluster.ts verifyTransfers), and its handover needs no round.
   */
  private settledSinceMs: number | undefined;
  private lastTransfersAtMs = Number.NEGATIVE_INFINITY;
  /** Members back without their data whose copies were dropped, by the incarnation they join at. */
  private readonly lostCopiesOf = new Map<string, number>();
  /** Whether the last plan waited for rendezvous ranking (logged once when it starts and ends). */
  private ranking = false;
  private answer: CoordinatorAnswer = { status: 'Ok', message: '' };

  constructor(private readonly config: CoordinatorMachineConfig) {
    this.table = config.restored ?? new AssignmentTable(config.fragmentCount);
    this.promise = config.restoredPromise;
  }

  get role(): CoordinatorRole {
    return this.roleNow;
  }

  /** The coordinator this node's view names (undefined when none is Up and reachable). */
  get currentCoordinator(): CoordinatorIdentity | undefined {
    return this.coordinator;
  }

  /** The table this node routes by (read-only to callers). */
  get current(): AssignmentTable {
    return this.table;
  }

  step(event: CoordinatorEvent): void {
    this.nowMs = Math.max(this.nowMs, event.nowMs);
    switch (event.kind) {
      case 'view':
        this.onView(event.view);
        break;
      case 'message':
        this.onMessage(event.message, event.table);
        break;
      case 'tick':
        break;
      case 'pin':
        this.answer = this.onPin(event.fragment, event.node);
        break;
    }
    this.runTimers();
  }

  takeActions(into: CoordinatorAction[]): void {
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  nextWakeMs(): number {
    return Math.max(this.nowMs, Math.min(this.reportRetryAtMs, this.nextDigestAtMs, this.nextPlanAtMs));
  }

  /** The answer to the last `pin` event. */
  get lastAnswer(): CoordinatorAnswer {
    return this.answer;
  }

  /** The text digest of a table the coordinator compares members' tables by. */
  static digestOf(table: AssignmentTable): string {
    const owner = table.epochCoordinator;
    let generations = 0;
    for (const [, entry] of table.entries()) generations += entry.generation;
    return `${table.epoch}/${owner === undefined ? '-' : `${owner.id}@${owner.incarnation}`}/${table.entries().length}/${generations}`;
  }

  // ---- Events ----

  private onView(view: readonly MemberView[]): void {
    this.view = view;
    const named = chooseCoordinator(view);
    if (!sameCoordinator(named, this.coordinator)) {
      this.coordinator = named;
      this.outbox.push({ kind: 'coordinator-changed', coordinator: named, epoch: this.table.epoch });
      if (named !== undefined && sameCoordinator(named, this.refusedCoordinator)) {
        this.refusedCoordinator = undefined;
        this.send(named.id, { kind: 'pull', from: this.config.selfId });
      }
    }
    this.act();
  }

  private onMessage(message: PlacementMessage, table: AssignmentTable | undefined): void {
    switch (message.kind) {
      case 'report-request':
        return this.onReportRequest(message.from, message.incarnation, message.epoch);
      case 'report':
        if (this.roleNow === 'coordinator' && message.refused && message.epoch >= this.table.epoch) {
          // A member promised a later epoch to another: take over again above it.
          this.log('info', `${message.from} holds epoch ${message.epoch}: taking over again above it`);
          this.roleNow = 'follower';
          this.proposal = Math.max(this.proposal, message.epoch + 1);
          return this.act();
        }
        if (this.roleNow !== 'taking-over' || table === undefined) return;
        if (message.refused) {
          // A refusal of an epoch the proposal is above already (a second member refusing the
          // changes of the epoch given up) changes nothing: the promises in hand, this node's own
          // among them, are of the proposal. Clearing them would lose its own for good: a retry
          // asks only the other members again.
          if (message.epoch < this.proposal) return;
          // Outbid on the next retry: every member is asked again at an epoch above the one it holds.
          // The reports in hand promised the epoch given up, not that one: none may count toward it.
          this.proposal = message.epoch + 1;
          this.reports.clear();
          return;
        }
        if (message.epoch !== this.proposal) return; // an answer to an earlier proposal
        this.reports.set(message.from, table);
        return this.act();
      case 'changes':
        if (table !== undefined) this.applyChanges(message.from, table);
        return;
      case 'digest':
        if (message.digest !== CoordinatorMachine.digestOf(this.table))
          this.send(message.from, { kind: 'pull', from: this.config.selfId });
        return;
      case 'ready':
        return this.onReady(message.from, message.fragment, message.generation);
      case 'ahead':
        return this.onAhead(message.fragment, message.generation);
      case 'lost-copies':
        return this.onLostCopies(message.from, message.member, message.incarnation);
      case 'pull':
        if (this.roleNow !== 'coordinator') return;
        this.counters.pulls++;
        return this.send(message.from, {
          kind: 'changes',
          from: this.config.selfId,
          table: encodeTable(this.table),
        });
    }
  }

  /** Promises `epoch` to the coordinator asking, when above every epoch held or promised (to another). */
  private onReportRequest(from: string, incarnation: number, epoch: number): void {
    const asking = { id: from, incarnation };
    const held = Math.max(this.table.epoch, this.promise?.epoch ?? 0);
    const again =
      this.promise !== undefined && this.promise.epoch === epoch && sameCoordinator(this.promise.to, asking);
    const table = encodeTable(this.table);
    if (!again && epoch <= held) {
      return this.send(from, { kind: 'report', from: this.config.selfId, epoch: held, refused: true, table });
    }
    if (!again) {
      this.promise = { epoch, to: asking };
      this.outbox.push({ kind: 'persist', table: this.table, promise: this.promise });
    }
    this.send(from, { kind: 'report', from: this.config.selfId, epoch, refused: false, table });
  }

  /** The promise made forbids this change: below the promised epoch, or at it from another coordinator. */
  private promiseForbids(fence: Fence): string | undefined {
    const p = this.promise;
    if (p === undefined || fence.epoch > p.epoch) return undefined;
    if (fence.epoch === p.epoch && p.to.id === fence.coordinatorId && p.to.incarnation === fence.incarnation)
      return undefined;
    return `epoch ${p.epoch} is promised to ${p.to.id}@${p.to.incarnation}; change from ${fence.coordinatorId}@${fence.incarnation} at epoch ${fence.epoch}`;
  }

  /** Asks for a view exchange with `member`, at most once per COORDINATOR_VIEW_SYNC_INTERVAL_MS. */
  private syncViewWith(member: string): void {
    const lastMs = this.viewSyncedAtMs.get(member);
    if (lastMs !== undefined && this.nowMs < lastMs + COORDINATOR_VIEW_SYNC_INTERVAL_MS) return;
    this.viewSyncedAtMs.set(member, this.nowMs);
    this.outbox.push({ kind: 'sync-view', member });
  }

  /** Applies every entry of a changes message as a change under its own fence. */
  private applyChanges(from: string, changes: AssignmentTable): void {
    const applied: number[] = [];
    const refusals: string[] = [];
    let promised = false;
    for (const [fragment, entry] of changes.entries()) {
      const forbidden = this.promiseForbids(entry.fence);
      if (forbidden !== undefined) {
        refusals.push(forbidden);
        promised = true;
        continue;
      }
      const mine = this.table.active(fragment);
      const result = this.table.apply({ fence: entry.fence, fragment, entry }, this.coordinator);
      if (result.outcome === 'applied') applied.push(fragment);
      else if (result.outcome === 'ignored') {
        this.counters.changesIgnored++;
        // Ours is from an older epoch at a higher generation: the coordinator must go above it.
        if (
          mine !== undefined &&
          mine.generation > entry.generation &&
          mine.fence.epoch < entry.fence.epoch
        ) {
          const ahead = {
            kind: 'ahead',
            from: this.config.selfId,
            fragment,
            generation: mine.generation,
          } as const;
          this.send(from, ahead);
        }
      } else {
        refusals.push(result.message);
        if (result.reason === 'non-current-coordinator') {
          this.refusedCoordinator = fenceCoordinator(entry.fence);
          this.syncViewWith(from);
        }
      }
    }
    this.counters.changesApplied += applied.length;
    this.counters.changesRefused += refusals.length;
    if (promised && this.promise !== undefined) {
      // The sender acts under an epoch this node promised away: it must outbid the promise.
      const table = encodeTable(this.table);
      this.send(from, {
        kind: 'report',
        from: this.config.selfId,
        epoch: this.promise.epoch,
        refused: true,
        table,
      });
    }
    if (refusals.length > 0) {
      // One line per distinct refusal: a coordinator this node does not name yet resends until views agree.
      const line = `assignment changes from ${from} refused (${refusals.length}): ${refusals[0]}`;
      if (line !== this.lastRefusal) this.log('warn', line);
      this.lastRefusal = line;
    }
    if (applied.length > 0) this.tableChanged(applied);
    // A node that joined hears only the entries changed since: it pulls the rest at once, rather
    // than know no replica of the other fragments until the coordinator's next digest.
    if (applied.length > 0 && !this.table.listsEveryFragment())
      this.send(from, { kind: 'pull', from: this.config.selfId });
  }

  // ---- The coordinator's part ----

  /** Takes over, or steps down, as the view and the majority gate say. */
  private act(): void {
    const self = this.config.selfId;
    const gateMembers = this.table.members();
    const gate = mayChangeTable(
      self,
      this.view,
      gateMembers.length > 0 ? gateMembers : this.config.initialMembers,
    );
    if (!gate.ok) {
      if (this.roleNow !== 'follower') this.log('info', `no longer acting as coordinator: ${gate.message}`);
      this.roleNow = 'follower';
      this.reports.clear();
      this.reportRetryAtMs = Number.POSITIVE_INFINITY;
      this.nextDigestAtMs = Number.POSITIVE_INFINITY;
      this.nextPlanAtMs = Number.POSITIVE_INFINITY;
      this.settledSinceMs = undefined;
      return;
    }
    if (this.roleNow === 'coordinator') {
      // Still the same identity? A restart of ours would have a new incarnation and start as follower.
      if (sameCoordinator(this.table.epochCoordinator, gate.coordinator)) return this.plan();
      this.roleNow = 'follower';
    }
    if (this.roleNow === 'taking-over' && !sameCoordinator(this.proposer, gate.coordinator)) {
      // Our incarnation changed mid-takeover: promises made to the earlier one are not ours.
      this.roleNow = 'follower';
    }
    if (this.roleNow === 'follower') {
      this.roleNow = 'taking-over';
      this.proposer = gate.coordinator;
      this.counters.takeovers++;
      this.proposal = Math.max(this.proposal, this.table.epoch, this.promise?.epoch ?? 0) + 1;
      this.requestReports(gate.coordinator);
    }
    this.tryTakeover(gate.coordinator);
  }

  /**
   * Asks every live member that has not promised the current proposal (this node promises itself
   * first; a proposal raised by a refusal starts the round again).
   */
  private requestReports(self: CoordinatorIdentity): void {
    const held = Math.max(this.table.epoch, this.promise?.epoch ?? 0);
    const ownPromise =
      this.promise !== undefined &&
      this.promise.epoch === this.proposal &&
      sameCoordinator(this.promise.to, self);
    if (!ownPromise) {
      this.proposal = Math.max(this.proposal, held + 1);
      this.reports.clear();
      this.promise = { epoch: this.proposal, to: self };
      this.outbox.push({ kind: 'persist', table: this.table, promise: this.promise });
    }
    // This node's own report is its table: no message brings it (the mesh sends nothing to itself).
    this.reports.set(self.id, this.table);
    for (const id of takeoverReporters(this.view)) {
      if (!this.reports.has(id))
        this.send(id, {
          kind: 'report-request',
          from: self.id,
          incarnation: self.incarnation,
          epoch: this.proposal,
        });
    }
    this.reportRetryAtMs = this.nowMs + this.config.reportRetryMs;
  }

  private tryTakeover(self: CoordinatorIdentity): void {
    const result = rebuildFromReports(self, this.view, this.reports, this.proposal);
    if (result.kind === 'refuse') {
      if (result.missing.length === 0) this.log('warn', result.message);
      return;
    }
    let table = result.table;
    let changed = result.changes.map((c) => c.fragment);
    let how = `adopted the table of ${this.reports.size} member(s)`;
    if (table.entries().length === 0) {
      if (!this.config.mayBootstrap) {
        this.log('info', 'no member reports a table, and a joining node does not bootstrap one: waiting');
        return;
      }
      table = this.bootstrap(self, table.epoch);
      changed = table.entries().map(([f]) => f);
      how = 'bootstrapped the table';
    }
    // The gate counted this node's own table (a joiner's is empty); the one adopted may name other
    // members, and a coordinator must reach a majority of those too, or it acts for a minority.
    if (!reachesMajority(table.members(), this.view)) {
      const line = `the reported table's ${table.members().length} members are not reached by a majority here: waiting`;
      if (line !== this.lastTakeoverWait) this.log('info', line);
      this.lastTakeoverWait = line;
      return;
    }
    this.lastTakeoverWait = '';
    this.table = table;
    this.roleNow = 'coordinator';
    this.reports.clear();
    this.reportRetryAtMs = Number.POSITIVE_INFINITY;
    this.nextDigestAtMs = this.nowMs + this.config.digestIntervalMs;
    this.log('info', `coordinator ${self.id}@${self.incarnation} at table epoch ${table.epoch}: ${how}`);
    this.outbox.push({ kind: 'coordinator-changed', coordinator: self, epoch: table.epoch });
    this.tableChanged(changed);
    this.broadcastTable();
    this.plan();
  }

  /** The first table: the placement the nodes run already (static start), else the planner's. */
  private bootstrap(self: CoordinatorIdentity, epoch: number): AssignmentTable {
    const fence = { coordinatorId: self.id, incarnation: self.incarnation, epoch };
    const { initialPlacement, fragmentCount, replicas } = this.config;
    const changes: TableChange[] =
      initialPlacement.length === fragmentCount
        ? initialPlacement.map((list, fragment) => ({
            fence,
            fragment,
            entry: {
              kind: 'active',
              generation: 1,
              replicas: [...list],
              moving: null,
              pinnedTo: null,
              fence,
              history: [
                { generation: 1, from: [], to: [...list], reason: 'bootstrap', timestampMs: this.nowMs },
              ],
            },
          }))
        : bootstrapChanges(fragmentCount, this.view, Math.min(replicas, this.view.length), fence, this.nowMs);
    const table = AssignmentTable.from(fragmentCount, epoch, self, []);
    for (const change of changes) table.apply(change, self);
    return table;
  }

  private broadcastTable(): void {
    const message: PlacementMessage = {
      kind: 'changes',
      from: this.config.selfId,
      table: encodeTable(this.table),
    };
    for (const member of this.view) {
      if (member.id !== this.config.selfId && member.reachable) this.send(member.id, message);
    }
  }

  // ---- Moves: started by the planner, finished when the target is ready, cancelled when it left ----

  /** Whether this node may change the table now (it coordinates, with a majority). */
  private acting(): boolean {
    if (this.roleNow !== 'coordinator') return false;
    const members = this.table.members();
    return mayChangeTable(this.config.selfId, this.view, members).ok;
  }

  private fence(): Fence {
    const owner = this.table.epochCoordinator;
    assert(owner !== undefined, 'a coordinator owns its epoch');
    return { coordinatorId: owner.id, incarnation: owner.incarnation, epoch: this.table.epoch };
  }

  /** Starts the moves the planner allows now and cancels those whose target is no longer eligible. */
  private plan(): void {
    const limits = this.config.moves;
    if (limits === undefined || !this.acting()) return;
    // A cold ranking (a new coordinator over many members and fragments) takes seconds: it ranks
    // a slice at a time, the event loop free between slices, and plans once it is done.
    const budget = this.config.weighsPerSlice ?? RENDEZVOUS_WEIGHS_PER_SLICE;
    const view = this.planningView();
    if (!rankForPlanning(this.table, view, this.config.replicas, budget)) {
      if (!this.ranking) this.log('info', 'ranking the members for every fragment before planning');
      this.ranking = true;
      this.nextPlanAtMs = this.nowMs + RENDEZVOUS_SLICE_PAUSE_MS;
      return;
    }
    if (this.ranking) this.log('info', 'ranked the members for every fragment: planning');
    this.ranking = false;
    const plan = planMoves(this.table, view, this.config.replicas, limits);
    const fence = this.fence();
    const cancels = plan.cancellations.map((fragment) =>
      cancelMove(fragment, this.table.active(fragment) as ActiveAssignment, fence, this.nowMs),
    );
    const starts = plan.moves.map((move) =>
      startMove(this.table.active(move.fragment) as ActiveAssignment, move, fence, this.nowMs),
    );
    // The whole round at once when it keeps the majority (a start only adds a reachable target);
    // else change by change, holding back those that would not.
    const all = reachesMajorityAfter(this.table, [...cancels, ...starts], this.view);
    const changes: TableChange[] = [];
    let held = false;
    const keeps = (change: TableChange): boolean => {
      if (all || this.keepsMajority([...changes, change])) return true;
      held = true;
      return false;
    };
    for (const change of cancels) {
      if (!keeps(change)) continue;
      changes.push(change);
      this.counters.movesCancelled++;
    }
    for (const [i, change] of starts.entries()) {
      if (!keeps(change)) continue;
      const move = plan.moves[i]!;
      changes.push(change);
      this.counters.movesStarted++;
      this.log(
        'info',
        `move of fragment ${move.fragment}: ${move.source ?? '-'} -> ${move.target} (${move.reason})`,
      );
    }
    // A settled table evens out who serves, a batch per plan interval (see settledSinceMs).
    const settled = changes.length === 0 && !held && plan.blocked.length === 0 && this.movesInFlight() === 0;
    this.settledSinceMs = settled ? (this.settledSinceMs ?? this.nowMs) : undefined;
    const transfersAtMs = settled
      ? Math.max(this.settledSinceMs as number, this.lastTransfersAtMs) + this.config.planIntervalMs
      : Number.POSITIVE_INFINITY;
    const transfers =
      this.nowMs >= transfersAtMs
        ? servingTransfers(this.table, view, PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX)
        : [];
    if (transfers.length > 0) this.lastTransfersAtMs = this.nowMs;
    for (const transfer of transfers) {
      const entry = this.table.active(transfer.fragment) as ActiveAssignment;
      changes.push(transferServing(transfer.fragment, entry, transfer.to, fence, this.nowMs));
      this.counters.servingTransfers++;
      this.log(
        'info',
        `serving of fragment ${transfer.fragment}: ${transfer.from} -> ${transfer.to} (balance)`,
      );
    }
    this.commit(changes);
    this.noteBlocked(plan.blocked);
    // Moves held back (a limit, an unreachable member, the majority) and transfers go on at the next
    // plan; a settled table plans once more when transfers may start, and an even one sleeps.
    const waiting = plan.blocked.length > 0 || held || this.movesInFlight() > 0 || transfers.length > 0;
    this.nextPlanAtMs = waiting
      ? this.nowMs + this.config.planIntervalMs
      : this.nowMs < transfersAtMs
        ? transfersAtMs
        : Number.POSITIVE_INFINITY;
  }

  /**
   * Says when the planner becomes blocked (a change it cannot make: too few eligible members), and
   * when it no longer is — once per change, not at every plan interval — so a leave or a
   * re-replication that stalls is never silent.
   */
  private noteBlocked(blocked: readonly string[]): void {
    const now = blocked.join('\n');
    if (now === this.blockedBefore) return;
    this.blockedBefore = now;
    if (blocked.length === 0) return this.log('info', 'placement no longer blocked');
    const listed = blocked.slice(0, PLACEMENT_BLOCKED_LISTED_MAX).join('; ');
    const more = blocked.length - PLACEMENT_BLOCKED_LISTED_MAX;
    this.log('warn', `placement blocked: ${listed}${more > 0 ? ` (and ${more} more)` : ''}`);
  }

  private movesInFlight(): number {
    let count = 0;
    for (const [, entry] of this.table.entries())
      if (entry.kind === 'active' && entry.moving !== null) count++;
    return count;
  }

  private onReady(from: string, fragment: number, generation: number): void {
    if (!this.acting()) return;
    const entry = this.table.active(fragment);
    // A ready for an earlier generation (or another move) is stale: the target reports again.
    if (entry === undefined || entry.generation !== generation || entry.moving?.target !== from) return;
    const change = finishMove(fragment, entry, this.fence(), this.nowMs);
    if (!this.keepsMajority([change])) return; // the target sends its ready again
    this.counters.movesFinished++;
    this.log('info', `move of fragment ${fragment} finished: ${entry.moving.source ?? '-'} -> ${from}`);
    this.commit([change]);
    this.plan();
  }

  private onAhead(fragment: number, generation: number): void {
    if (!this.acting()) return;
    const entry = this.table.active(fragment);
    if (entry === undefined || entry.generation > generation) return; // reissued already
    this.counters.reissues++;
    this.log(
      'info',
      `fragment ${fragment}: a member holds generation ${generation} from an older epoch: reissued above it`,
    );
    this.commit([reissueAbove(fragment, entry, generation, this.fence(), this.nowMs)]);
  }

  private onLostCopies(seed: string, member: string, incarnation: number): void {
    if (!this.acting()) return; // the seed asks again at the joiner's next attempt
    // Its new run was admitted already: the question is stale. Its old run is gone even where this
    // view still holds it reachable (not yet detected): the seed asks only for a joiner at the
    // address a live run would hold.
    if (this.admittedSince(member, incarnation)) return;
    // No copy goes to it before its new run is admitted (planningView).
    this.lostCopiesOf.set(member, Math.max(incarnation, this.lostCopiesOf.get(member) ?? 0));
    const changes = dropLostCopies(this.table, member, this.fence(), this.nowMs);
    if (changes.length === 0 || !this.keepsMajority(changes)) return;
    this.log(
      'info',
      `${member} is back without its data (joining through ${seed}): dropped from the replicas of ${changes.length} fragments, which moves restore`,
    );
    this.counters.lostCopiesDropped += changes.length;
    this.commit(changes);
    this.plan();
  }

  /**
   * The view the planner places by: a member whose lost copies were dropped is not eligible until its
   * new run is admitted (the view holds it at the incarnation it joins at), though its earlier run
   * may look Up and reachable for a while; a copy planned onto it would wait, and be dropped again.
   */
  private planningView(): readonly MemberView[] {
    if (this.lostCopiesOf.size === 0) return this.view;
    for (const [id, incarnation] of this.lostCopiesOf)
      if (this.admittedSince(id, incarnation)) this.lostCopiesOf.delete(id);
    return this.view.map((m) =>
      (this.lostCopiesOf.get(m.id) ?? 0) > m.incarnation ? { ...m, state: 'Joining' } : m,
    );
  }

  /** The view holds `member` at `incarnation` or later (its run that joins at it was admitted), or not at all. */
  private admittedSince(member: string, incarnation: number): boolean {
    const known = this.view.find((m) => m.id === member);
    return known === undefined || known.incarnation >= incarnation;
  }

  private onPin(fragment: number, node: string): CoordinatorAnswer {
    if (!this.acting()) {
      const named = this.coordinator?.id ?? '<none>';
      return {
        status: 'Conflict',
        message: `this node is not the acting placement coordinator (current: ${named})`,
      };
    }
    if (!Number.isInteger(fragment) || fragment < 0 || fragment >= this.config.fragmentCount)
      return { status: 'BadRequest', message: `fragment must be 0..${this.config.fragmentCount - 1}` };
    const entry = this.table.active(fragment);
    if (entry === undefined) return { status: 'NotFound', message: `fragment ${fragment} has no replicas` };
    if (entry.pinnedTo === node)
      return { status: 'Ok', message: `fragment ${fragment} is pinned to ${node} already` };
    const change = pinFragment(fragment, entry, node, this.view, this.fence());
    if ('status' in change) return change;
    this.commit([change]);
    this.plan();
    return {
      status: 'Ok',
      message: `fragment ${fragment} pinned to ${node}; the planner moves a replica there`,
    };
  }

  /**
   * Whether this coordinator still reaches a majority of the table's members once `changes` apply,
   * else it would write a table it acts for no majority of (and step down at once). Such a change
   * waits until members it does not reach leave the table (a Down one's repairs) or are reached again.
   */
  private keepsMajority(changes: readonly TableChange[]): boolean {
    if (reachesMajorityAfter(this.table, changes, this.view)) return true;
    const line = `a change to fragment ${changes[changes.length - 1].fragment} would leave the table's members without a majority reached here: waiting`;
    if (line !== this.lastChangeWait) this.log('info', line);
    this.lastChangeWait = line;
    return false;
  }

  /** Applies the coordinator's own changes, saves them, and sends them to every reachable member. */
  private commit(changes: readonly TableChange[]): void {
    if (changes.length === 0) return;
    this.lastChangeWait = '';
    const self = fenceCoordinator(changes[0].fence);
    const sent = AssignmentTable.from(this.config.fragmentCount, this.table.epoch, self, []);
    const applied: number[] = [];
    for (const change of changes) {
      const result = this.table.apply(change, self);
      assert(result.outcome === 'applied', `the coordinator's own change applies: ${result.outcome}`);
      sent.apply(change, self);
      applied.push(change.fragment);
    }
    this.counters.changesApplied += applied.length;
    this.tableChanged(applied);
    const message: PlacementMessage = { kind: 'changes', from: this.config.selfId, table: encodeTable(sent) };
    for (const member of this.view) {
      if (member.id !== this.config.selfId && member.reachable) this.send(member.id, message);
    }
  }

  private runTimers(): void {
    if (this.roleNow === 'coordinator' && this.nowMs >= this.nextPlanAtMs) this.plan();
    if (
      this.roleNow === 'taking-over' &&
      this.nowMs >= this.reportRetryAtMs &&
      this.coordinator !== undefined
    )
      this.requestReports(this.coordinator);
    if (this.roleNow === 'coordinator' && this.nowMs >= this.nextDigestAtMs) {
      const digest = CoordinatorMachine.digestOf(this.table);
      for (const member of this.view) {
        if (member.id !== this.config.selfId && member.reachable)
          this.send(member.id, { kind: 'digest', from: this.config.selfId, digest });
      }
      this.nextDigestAtMs = this.nowMs + this.config.digestIntervalMs;
    }
  }

  private tableChanged(fragments: number[]): void {
    this.outbox.push({ kind: 'persist', table: this.table, promise: this.promise });
    this.outbox.push({ kind: 'table-changed', fragments });
  }

  private send(to: string, message: PlacementMessage): void {
    this.outbox.push({ kind: 'send', to, message });
  }

  private log(level: 'info' | 'warn', message: string): void {
    this.outbox.push({ kind: 'log', level, message });
  }
}
