// The main thread's driver of the placement machine (core/placement-machine.ts): it feeds it the
// table this node routes by, the outcome of each step it carried out and the time, and carries out
// its actions through PlacementIo — the workers (hold, verify, drain, drop), the coordinator (ready)
// and the node's routing (serve). Every step runs at most once at a time per fragment (the machine
// marks it before the action leaves) and reports back with the generation it was started for.

import type { AssignmentTable } from '../../core/assignment-table.js';
import type { DriverClock } from '../../core/clock.js';
import {
  type FragmentPlacement,
  type PlacementAction,
  type PlacementEvent,
  PlacementMachine,
  type PlacementMachineConfig,
  type PlacementStep,
} from '../../core/placement-machine.js';

/** What the driver needs from the node around it; each step's promise settles once the step is done. */
export interface PlacementIo {
  /** Opens the fragment if needed and replicates it to `replicas` (member ids, this node among them) only. */
  hold(fragment: number, replicas: readonly string[]): Promise<void>;
  /** Completes an anti-entropy round, started from now, against one of `sources`; rejects when none completes. */
  verify(fragment: number, sources: readonly string[]): Promise<void>;
  /**
   * Replicates to `targets` only and waits until each pulled the whole copy onto its disk (its table
   * at `generation` or later) and acknowledged every write at stable.
   */
  drain(fragment: number, targets: readonly string[], generation: number): Promise<void>;
  /** Removes the copy. */
  drop(fragment: number): Promise<void>;
  /** Tells the coordinator this node holds a verified copy at `generation`. */
  ready(fragment: number, generation: number): void;
  /** Serve the fragment here, or forward its requests to a serving replica. */
  serve(fragment: number, serving: boolean): void;
  /** A step's outcome was taken in (the fragments' states may have changed). */
  stepped(): void;
  log(level: 'info' | 'warn' | 'error', fields: Record<string, unknown>, message: string): void;
}

export class PlacementDriver {
  private readonly machine: PlacementMachine;
  private readonly actions: PlacementAction[] = [];
  private closed = false;
  private readonly wake = (): void => this.step({ kind: 'tick', nowMs: this.clock.nowMs() });

  constructor(
    config: PlacementMachineConfig,
    private readonly io: PlacementIo,
    private readonly clock: DriverClock,
  ) {
    this.machine = new PlacementMachine(config);
  }

  /** The fragments the node's stores held at start; before any table. */
  start(held: readonly number[]): void {
    this.step({ kind: 'start', held, nowMs: this.clock.nowMs() });
  }

  /** The table this node routes by changed (`fragments`: the entries that did). */
  onTable(table: AssignmentTable, fragments: readonly number[]): void {
    this.step({ kind: 'table', table, fragments, nowMs: this.clock.nowMs() });
  }

  /** This node handed every fragment over and exits the cluster: it takes no copy from now on. */
  exit(): void {
    this.step({ kind: 'exit', nowMs: this.clock.nowMs() });
  }

  serves(fragment: number): boolean {
    return this.machine.serves(fragment);
  }

  fragment(fragment: number): FragmentPlacement | undefined {
    return this.machine.fragment(fragment);
  }

  fragments(): FragmentPlacement[] {
    return this.machine.fragments();
  }

  get counters(): PlacementMachine['counters'] {
    return this.machine.counters;
  }

  close(): void {
    this.closed = true;
    this.clock.clearTimer();
  }

  private step(event: PlacementEvent): void {
    if (this.closed) return;
    this.machine.step(event);
    this.machine.takeActions(this.actions);
    const actions = this.actions.splice(0);
    for (const action of actions) this.carryOut(action);
    const wakeMs = this.machine.nextWakeMs();
    if (Number.isFinite(wakeMs)) this.clock.setTimer(wakeMs, this.wake);
    else this.clock.clearTimer();
  }

  private carryOut(action: PlacementAction): void {
    switch (action.kind) {
      case 'hold':
        return this.run(
          action.fragment,
          'hold',
          action.generation,
          this.io.hold(action.fragment, action.replicas),
        );
      case 'verify':
        return this.run(
          action.fragment,
          'verify',
          action.generation,
          this.io.verify(action.fragment, action.sources),
        );
      case 'drain':
        return this.run(
          action.fragment,
          'drain',
          action.generation,
          this.io.drain(action.fragment, action.targets, action.generation),
        );
      case 'drop':
        this.io.log(
          'info',
          { fragment: action.fragment, generation: action.generation },
          'dropping a fragment copy',
        );
        return this.run(action.fragment, 'drop', action.generation, this.io.drop(action.fragment));
      case 'ready':
        return this.io.ready(action.fragment, action.generation);
      case 'serve':
        this.io.log(
          'info',
          { fragment: action.fragment, serving: action.serving },
          'fragment serving changed',
        );
        return this.io.serve(action.fragment, action.serving);
      case 'warn':
        return this.io.log('warn', action.fields, action.message);
    }
  }

  /** Reports a step's outcome to the machine once it settles, after the current step returned. */
  private run(fragment: number, step: PlacementStep, generation: number, work: Promise<void>): void {
    const done = (ok: boolean, detail: string): void => {
      this.step({ kind: 'done', fragment, step, generation, ok, detail, nowMs: this.clock.nowMs() });
      if (!this.closed) this.io.stepped();
    };
    work.then(
      () => done(true, ''),
      (err: Error) => {
        this.io.log(
          'warn',
          { fragment, step, generation, err: err.message },
          'fragment placement step failed',
        );
        done(false, err.message);
      },
    );
  }
}
