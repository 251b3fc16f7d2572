// Catch-up after a failover (DESIGN.md "Cluster"): when a fragment's first serving replica, as this
// node routes it, moves to this node because the one before is no longer up, this node may lack
// writes that replica acknowledged and replicated to the others but not yet to it; and a node that
// restarts lacks what was written while it was away. Before it serves such a fragment it runs an
// anti-entropy round against every other reachable replica — the verification a gained copy gets —
// so a write acknowledged by one other replica (WAIT 1, --replica-acks 1) is read through this node
// as soon as it serves. When the table puts this node first while the one before is still up (a
// move finished), that one alone took the writes this node may lack: it hands them over (once it
// routes here too, so takes no more, its replication here is drained). When this copy was verified
// by a round against that replica that started once it replicated here, and its replication here
// dropped nothing since (the same continuity: src/core/replication-sender.ts), the handover
// completes the copy: what it took before is in the round, what it took since was drained.
// Otherwise one round against it takes what it never queued here — unless that replica's handoff
// has this node pull its copy whole first (`absorbed`: the table dropped it, so it stopped taking
// writes before): that pull is such a round, and the replica drops its copy once it ends, so a
// round of the catch-up's own against it would find nothing to answer it.
// (Until a first other replica is reachable after a start, there is nothing to catch up from, and
// the node serves what its copy has.) Requests for the fragment that arrive meanwhile are held and
// sent on once the rounds end (or their time runs out), so clients see a pause, not an error; the
// pause is measured.

import { backpressure, type TesseraError } from '../../core/errors.js';
import { FAILOVER_CATCH_UP_MS_MAX, FAILOVER_HELD_REQUESTS_MAX } from '../../core/limits.js';
import type { OpLink } from '../dispatcher.js';
import type { ResultHandler } from '../worker-link.js';

/**
 * How a handover ended: `covered`, drained, and this copy holds everything the replica took before
 * (verified against it under the continuity it still has); `drained`, every write it queued here is
 * acknowledged; `failed`, not in time, or it does not replicate here.
 */
export type HandoverOutcome = 'covered' | 'drained' | 'failed';

/** How a catch-up's round ended: `reason` says why it did not complete (empty when it did). */
export interface RoundEnd {
  ok: boolean;
  reason: string;
}

/** What the catch-up needs from the cluster around it. */
export interface CatchUpHost {
  readonly fragmentCount: number;
  readonly selfIndex: number;
  /** The fragment's first serving replica as routing picks it now, -1 when none. */
  firstServing(fragment: number): number;
  isUp(member: number): boolean;
  /** The member's node id, for logs. */
  memberName(member: number): string;
  /** The other replicas of the fragment that serve it (member indices). */
  peersOf(fragment: number): readonly number[];
  /** An anti-entropy round of the fragment against `member`, started now: whether it completed, and why not. */
  reconcile(fragment: number, member: number, timeoutMs: number): Promise<RoundEnd>;
  /** `member`, which served the fragment before, hands over every write it took for it (HandoverOutcome). */
  handover(fragment: number, member: number, timeoutMs: number): Promise<HandoverOutcome>;
  /** Sends an encoded request on to the fragment's serving replica as routing picks it now. */
  resubmit(fragment: number, request: Buffer, handler: ResultHandler<unknown>, token: unknown): void;
  nowMs(): number;
  /** Calls `fire` after `ms` (on the host's clock); the function returned cancels it. */
  after(ms: number, fire: () => void): () => void;
  log(level: 'info' | 'warn', fields: Record<string, unknown>, message: string): void;
}

export interface CatchUpCounters {
  /** Catch-ups started. */
  catchUps: number;
  /** Catch-ups that ended with some round not complete (served anyway, after FAILOVER_CATCH_UP_MS_MAX at most). */
  incomplete: number;
  /** Handovers that completed the copy without a round. */
  covered: number;
  /** Catch-ups completed by the handing replica's handoff pulling its copy here whole (`absorbed`). */
  absorbed: number;
  /** Requests held during catch-ups. */
  held: number;
  /** How long the last catch-up held the fragment, and the longest. */
  lastMs: number;
  maxMs: number;
}

/** A held request: sends it on once the fragment is served. */
type Held = () => void;

/** Holds a fragment's requests while it catches up; looks like any other link to the dispatcher. */
class HoldingLink implements OpLink {
  buffer: Buffer = Buffer.alloc(0);
  readonly reqId = 0;
  readonly held: Held[] = [];
  private pending: { handler: ResultHandler<unknown>; token: unknown } | undefined;

  constructor(
    readonly fragment: number,
    private readonly host: CatchUpHost,
  ) {}

  canAccept(): boolean {
    return this.held.length < FAILOVER_HELD_REQUESTS_MAX;
  }

  refusal(): TesseraError {
    return backpressure(
      `fragment ${this.fragment} is catching up after a failover, with ${FAILOVER_HELD_REQUESTS_MAX} requests waiting`,
    );
  }

  begin<T>(handler: ResultHandler<T>, token: T, bytes: number): number {
    this.buffer = Buffer.allocUnsafe(bytes);
    this.pending = { handler: handler as ResultHandler<unknown>, token };
    return 0;
  }

  end(): void {
    const { handler, token } = this.pending!;
    const request = this.buffer;
    this.held.push(() => this.host.resubmit(this.fragment, request, handler, token));
    this.pending = undefined;
  }
}

/** `FailoverCatchUp.published` for a fragment this node serves once it has caught it up. */
export const SERVING_HELD = -2;

export class FailoverCatchUp {
  /** Per fragment, the member routing picked last (-1 before the first look). */
  private readonly servedBy: Int32Array;
  /** Per fragment, the `servingStamp` at which `servedBy` last changed. */
  private readonly changedAt: Float64Array;
  /** Grows by one at each change of some fragment's `servedBy`. */
  servingStamp = 0;
  /**
   * Per fragment, what the workers' RESP ports read (shared memory): the member serving it, or
   * SERVING_HELD while this node serves it but still catches it up (its requests wait); then, at
   * index fragmentCount, `servingStamp` (what a worker port's writes are tracked under for WAIT).
   */
  readonly published: Int32Array;
  /** Per fragment, 1 once this node caught up since it started serving it (after its start, or a failover). */
  private readonly caughtUp: Uint8Array;
  private readonly holding = new Map<number, HoldingLink>();
  /**
   * Per fragment, the member whose copy this node pulled whole as that member handed it over
   * (`absorbed`), since the fragment's serving member last changed to another node (-1: none).
   */
  private readonly absorbedFrom: Int32Array;
  /** Per fragment caught up from a member that hands it over: ends the catch-up once its copy is pulled here. */
  private readonly awaitingAbsorb = new Map<number, { from: number; end: () => void }>();
  /** Set by `close`: the node is closing, its peers' links going down one by one. */
  private closing = false;
  readonly counters: CatchUpCounters = {
    catchUps: 0,
    incomplete: 0,
    covered: 0,
    absorbed: 0,
    held: 0,
    lastMs: 0,
    maxMs: 0,
  };

  constructor(private readonly host: CatchUpHost) {
    this.servedBy = new Int32Array(host.fragmentCount).fill(-1);
    this.published = new Int32Array(
      new SharedArrayBuffer((host.fragmentCount + 1) * Int32Array.BYTES_PER_ELEMENT),
    ).fill(-1);
    this.published[host.fragmentCount] = 0;
    this.changedAt = new Float64Array(host.fragmentCount);
    this.caughtUp = new Uint8Array(host.fragmentCount);
    this.absorbedFrom = new Int32Array(host.fragmentCount).fill(-1);
  }

  /**
   * This node pulled `member`'s copy of `fragment` whole, by a complete round that started after
   * `member` stopped taking writes for it (its handoff: the table no longer lists it): the copy
   * holds everything `member` took. A catch-up from `member` is complete then.
   */
  absorbed(fragment: number, member: number): void {
    this.absorbedFrom[fragment] = member;
    const waiting = this.awaitingAbsorb.get(fragment);
    if (waiting?.from === member) waiting.end();
  }

  /** The link holding the fragment's requests while it catches up; undefined otherwise. */
  link(fragment: number): OpLink | undefined {
    return this.holding.get(fragment);
  }

  /**
   * Holds a request another node forwarded while the fragment catches up (`link` says it does):
   * `serve` runs it once the fragment is served; `refuse` answers it when too many wait.
   */
  holdForwarded(fragment: number, serve: () => void, refuse: (error: TesseraError) => void): void {
    const link = this.holding.get(fragment);
    if (link === undefined) return serve();
    if (link.canAccept()) link.held.push(serve);
    else refuse(link.refusal());
  }

  /**
   * The node is closing: its clients are refused and its peer links close one by one, each making
   * this node look like the serving replica of more fragments. None of that starts a catch-up, and
   * one cut short by the closing worker is not reported as serving an incomplete copy.
   */
  close(): void {
    this.closing = true;
  }

  /** The `servingStamp` at which the fragment's serving member last changed (0: never looked at). */
  servingChangedAt(fragment: number): number {
    return this.changedAt[fragment];
  }

  /** Fragments being caught up now. */
  inProgress(): number {
    return this.holding.size;
  }

  /**
   * After the view or the table changed: a fragment this node serves that has not caught up since
   * this node started, or whose serving replica moved here from another — one no longer up, or one
   * the table put after this node — catches up once some other replica is reachable. Every change
   * of a fragment's serving member is stamped (`servingChangedAt`).
   */
  check(): void {
    const self = this.host.selfIndex;
    for (let f = 0; f < this.servedBy.length; f++) {
      const before = this.servedBy[f];
      const now = this.host.firstServing(f);
      this.servedBy[f] = now;
      if (now !== before) this.changedAt[f] = ++this.servingStamp;
      // A pull from a member before it served again says nothing of what it took since.
      if (now !== before && now !== self) this.absorbedFrom[f] = -1;
      if (now === self && before !== -1 && before !== self) this.caughtUp[f] = 0;
      if (now === self && this.caughtUp[f] === 0 && !this.holding.has(f)) this.catchUp(f, before);
      Atomics.store(this.published, f, this.holding.has(f) ? SERVING_HELD : now);
    }
    Atomics.store(this.published, this.servedBy.length, this.servingStamp);
  }

  private catchUp(fragment: number, from: number): void {
    // Handed over by a replica still up (the table put this node first): only it took writes this
    // node may lack; it hands them over (its replication to this node drained once it routes here),
    // then, unless that covered the copy, a round against it takes what it took before it
    // replicated here. After a failover, any replica may hold what the lost one replicated before
    // it went: a round against each.
    const handedOver = from !== -1 && from !== this.host.selfIndex && this.host.isUp(from);
    const sources = handedOver
      ? [from]
      : this.host.peersOf(fragment).filter((m) => m !== this.host.selfIndex && this.host.isUp(m));
    if (sources.length === 0) return; // nothing to learn from yet: this node's copy is all there is
    if (this.closing) return;
    const link = new HoldingLink(fragment, this.host);
    this.holding.set(fragment, link);
    this.counters.catchUps++;
    const startedMs = this.host.nowMs();
    let handover: HandoverOutcome | 'none' = 'none';
    let ended = false;
    // Each source's round, named in the log when it did not complete.
    const round = (m: number): Promise<string> =>
      this.host.reconcile(fragment, m, FAILOVER_CATCH_UP_MS_MAX).then(
        (end) => (end.ok ? '' : `${this.host.memberName(m)}: ${end.reason}`),
        (err: Error) => `${this.host.memberName(m)}: ${err.message}`,
      );
    const rounds = handedOver
      ? [
          this.host
            .handover(fragment, from, FAILOVER_CATCH_UP_MS_MAX)
            .catch((): HandoverOutcome => 'failed')
            .then((outcome) => {
              handover = outcome;
              if (ended) return ''; // absorbed meanwhile, or late: no round for nothing
              if (outcome !== 'covered') return round(from);
              this.counters.covered++;
              return '';
            }),
        ]
      : sources.map(round);
    let cancel = (): void => {};
    const deadline = new Promise<'late'>((resolve) => {
      cancel = this.host.after(FAILOVER_CATCH_UP_MS_MAX, () => resolve('late'));
    });
    // The source's handoff pulling its copy here whole completes the catch-up too.
    const absorbed = new Promise<'absorbed'>((resolve) => {
      if (!handedOver) return;
      if (this.absorbedFrom[fragment] === from) return resolve('absorbed');
      this.awaitingAbsorb.set(fragment, { from, end: () => resolve('absorbed') });
    });
    Promise.race([Promise.all(rounds), absorbed, deadline]).then((outcome) => {
      cancel();
      ended = true;
      this.awaitingAbsorb.delete(fragment);
      const failed = typeof outcome === 'string' ? [] : outcome.filter((why) => why !== '');
      const complete = outcome !== 'late' && failed.length === 0;
      if (!complete) this.counters.incomplete++;
      if (outcome === 'absorbed') this.counters.absorbed++;
      const tookMs = this.host.nowMs() - startedMs;
      this.counters.lastMs = tookMs;
      this.counters.maxMs = Math.max(this.counters.maxMs, tookMs);
      this.counters.held += link.held.length;
      this.holding.delete(fragment);
      // Not again until the next failover (an incomplete one is logged: anti-entropy repairs the rest).
      this.caughtUp[fragment] = 1;
      Atomics.store(this.published, fragment, this.servedBy[fragment]);
      const fields: Record<string, unknown> = {
        fragment,
        from: from === -1 || from === this.host.selfIndex ? 'start' : this.host.memberName(from),
        sources: sources.length,
        handover,
        absorbed: outcome === 'absorbed',
        tookMs,
        held: link.held.length,
        complete,
      };
      if (failed.length > 0) fields.failed = failed;
      if (complete) this.host.log('info', fields, 'caught up: serving the fragment');
      else if (this.closing) this.host.log('info', fields, 'catch-up cut short: the node is closing');
      else
        this.host.log(
          'warn',
          fields,
          outcome === 'late'
            ? 'catch-up from the other replicas did not complete in time: serving the fragment with what this copy has'
            : 'catch-up round against another replica failed: serving the fragment with what this copy has',
        );
      for (const serve of link.held) serve();
    });
  }
}
