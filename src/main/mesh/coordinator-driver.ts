// The main thread's driver of the coordinator machine (core/coordinator-machine.ts): it feeds it
// this node's membership view whenever that changes, placement messages from peer connections and
// the time, keeps its one timer, and carries out its actions in order — a table is persisted before
// anything that follows it (routing by it, sending it on) is done, as datum persists before it
// publishes. Sockets and files are behind CoordinatorIo, so a test drives this very class.

import type { AssignmentTable, CoordinatorIdentity } from '../../core/assignment-table.js';
import type { DriverClock } from '../../core/clock.js';
import type { MemberView } from '../../core/coordinator.js';
import {
  type CoordinatorAction,
  type CoordinatorAnswer,
  type CoordinatorEvent,
  CoordinatorMachine,
  type CoordinatorMachineConfig,
  type CoordinatorRole,
  type EpochPromise,
  type PlacementMessage,
} from '../../core/coordinator-machine.js';
import { decodePlacementMessage, encodePlacementMessage } from '../../threads/placement-wire.js';

export interface CoordinatorIo {
  /** Sends an envelope on the peer connection to `nodeId`; false when none is open. */
  sendEnvelope(nodeId: string, envelope: Uint8Array): boolean;
  /** Writes the table and the promise durably (the data directory's cluster state); undefined when kept nowhere. */
  persist(table: AssignmentTable, promise: EpochPromise | undefined): Promise<void> | undefined;
  log(level: 'info' | 'warn' | 'error', fields: Record<string, unknown>, message: string): void;
  /** Exchanges this node's whole membership view with `nodeId` (a push-pull). */
  syncView(nodeId: string): void;
}

export interface CoordinatorListener {
  /** The table changed (and is saved): route by it. */
  onTableChanged(table: AssignmentTable, fragments: readonly number[]): void;
  /** The coordinator this node names changed, or took over at a new epoch. */
  onCoordinatorChanged(coordinator: CoordinatorIdentity | undefined, epoch: number): void;
}

export class CoordinatorDriver {
  private readonly machine: CoordinatorMachine;
  private readonly actions: CoordinatorAction[] = [];
  /** Actions waiting for a persist in flight; carried out in order once it lands. */
  private queue: CoordinatorAction[] = [];
  private persisting = false;
  private closed = false;
  private readonly wake = (): void => this.step({ kind: 'tick', nowMs: this.clock.nowMs() });

  constructor(
    private readonly config: CoordinatorMachineConfig,
    private readonly io: CoordinatorIo,
    private readonly listener: CoordinatorListener,
    private readonly clock: DriverClock,
  ) {
    this.machine = new CoordinatorMachine(config);
  }

  get table(): AssignmentTable {
    return this.machine.current;
  }

  get role(): CoordinatorRole {
    return this.machine.role;
  }

  get coordinator(): CoordinatorIdentity | undefined {
    return this.machine.currentCoordinator;
  }

  get counters(): CoordinatorMachine['counters'] {
    return this.machine.counters;
  }

  /** This node's membership view changed (a member event, a peer connection up or down). */
  onView(view: readonly MemberView[]): void {
    this.step({ kind: 'view', view, nowMs: this.clock.nowMs() });
  }

  /** A placement envelope from a peer connection; the reason when malformed (the connection is closed). */
  onEnvelope(envelope: Uint8Array, fragmentCount: number): string | undefined {
    const decoded = decodePlacementMessage(envelope, fragmentCount);
    if (decoded.kind === 'malformed') return decoded.reason;
    this.step({ kind: 'message', message: decoded.message, table: decoded.table, nowMs: this.clock.nowMs() });
    return undefined;
  }

  /** This node holds a verified copy of a move's fragment: tells the coordinator (itself, or over the mesh). */
  ready(fragment: number, generation: number): void {
    // Without a coordinator, sent again on the resend interval.
    this.toCoordinator({ kind: 'ready', from: this.config.selfId, fragment, generation });
  }

  /**
   * `member` asks to join at `incarnation` through this node without its earlier run's data: asks the
   * coordinator (itself, or over the mesh) to drop its lost copies.
   */
  lostCopies(member: string, incarnation: number): void {
    // Without a coordinator, asked again at the joiner's next attempt.
    this.toCoordinator({ kind: 'lost-copies', from: this.config.selfId, member, incarnation });
  }

  /** To the coordinator this node names: stepped here when it is this node; dropped when there is none. */
  private toCoordinator(message: PlacementMessage): void {
    const coordinator = this.machine.currentCoordinator;
    if (coordinator === undefined) return;
    if (coordinator.id === this.config.selfId)
      this.step({ kind: 'message', message, table: undefined, nowMs: this.clock.nowMs() });
    else this.io.sendEnvelope(coordinator.id, encodePlacementMessage(message));
  }

  /** `move FRAGMENT --to NODE` on the coordinator: records the pin, which the planner then honours. */
  pin(fragment: number, node: string): CoordinatorAnswer {
    this.step({ kind: 'pin', fragment, node, nowMs: this.clock.nowMs() });
    return this.machine.lastAnswer;
  }

  close(): void {
    this.closed = true;
    this.clock.clearTimer();
  }

  private step(event: CoordinatorEvent): void {
    if (this.closed) return;
    this.machine.step(event);
    this.machine.takeActions(this.actions);
    for (const action of this.actions) this.queue.push(action);
    this.actions.length = 0;
    this.run();
    const wakeMs = this.machine.nextWakeMs();
    if (Number.isFinite(wakeMs)) this.clock.setTimer(wakeMs, this.wake);
    else this.clock.clearTimer();
  }

  /** Carries out queued actions until one starts a write; the rest wait for it. */
  private run(): void {
    while (!this.persisting && !this.closed && this.queue.length > 0) {
      const action = this.queue.shift()!;
      if (action.kind !== 'persist') {
        this.carryOut(action);
        continue;
      }
      const written = this.io.persist(action.table, action.promise);
      if (written === undefined) continue;
      this.persisting = true;
      written
        .catch((err: Error) =>
          this.io.log(
            'error',
            { err: err.message },
            'cannot save the assignment table; routing by it anyway',
          ),
        )
        .finally(() => {
          this.persisting = false;
          this.run();
        });
    }
  }

  private carryOut(action: Exclude<CoordinatorAction, { kind: 'persist' }>): void {
    switch (action.kind) {
      case 'send':
        // A member without a connection misses it; the coordinator's digest brings it the table later.
        this.io.sendEnvelope(action.to, encodePlacementMessage(action.message));
        return;
      case 'table-changed':
        return this.listener.onTableChanged(this.machine.current, action.fragments);
      case 'coordinator-changed':
        return this.listener.onCoordinatorChanged(action.coordinator, action.epoch);
      case 'sync-view':
        return this.io.syncView(action.member);
      case 'log':
        return this.io.log(action.level, {}, action.message);
    }
  }
}
