// Waits for replica acknowledgements (WAIT, WAITAOF, --replica-acks), as pure state machines.
//
// A fragment's writes take positions in the order its actor hands them to the replication senders
// (the nth write is at position n, the same for every peer's sender). Each sender reports how far
// its peer has acknowledged, per level, and through which position a buffer reset dropped writes
// (those are never acknowledged by that peer: anti-entropy repairs them, unseen by any wait).
//
// ReplicaAckTracker (the worker's): waits of "position p of fragment f, at level L, by n peers";
// each is answered with the number of peers reached once n is reached, or at its deadline with the
// number reached by then. Acknowledgements arrive per peer in any order; a peer that disconnects
// simply stops acknowledging, and its waits answer at their deadline.
//
// WaitRound (the main thread's, one per WAIT / WAITAOF / gated write): the fragments a connection
// wrote, each asked in turn until it reaches its goal or the round's deadline passes; the answer is
// the smallest count over the fragments (every write of the connection is covered by that many).

import { assert } from './assert.js';
import { REPLICA_ACKS_MAX, REPLICA_WAITS_PER_WORKER_MAX } from './limits.js';
import { AckLevel } from './replication-sender.js';

/** One peer's progress on one fragment, as its sender reports it. */
export interface PeerProgress {
  /** Through which position the peer acknowledged, indexed by AckLevel (index 0 unused). */
  ackedThroughOps: [number, number, number, number];
  /** Through which position a reset dropped writes this peer will never acknowledge. */
  lostThroughOps: number;
}

export type AckTrackerEvent =
  /** `ackedThroughOps` indexed by AckLevel, as PeerProgress's. */
  | {
      kind: 'progress';
      fragment: number;
      peer: number;
      ackedThroughOps: readonly number[];
      lostThroughOps: number;
    }
  | {
      kind: 'wait';
      id: number;
      fragment: number;
      throughOps: number;
      level: AckLevel;
      replicas: number;
      /** Absolute wall ms; Infinity for none. */
      deadlineMs: number;
      nowMs: number;
    }
  | { kind: 'tick'; nowMs: number }
  /** The worker is closing: every wait answers with what it reached. */
  | { kind: 'close' };

export type AckTrackerAction =
  /** `reached`: the peers that acknowledged; `full`: too many waits, refused at once. */
  { kind: 'answer'; id: number; reached: number; full: boolean };

interface Wait {
  id: number;
  fragment: number;
  throughOps: number;
  level: AckLevel;
  replicas: number;
  deadlineMs: number;
}

export class ReplicaAckTracker {
  /** Per fragment, per peer, its progress. Only fragments a wait asked about are kept. */
  private readonly progress = new Map<number, Map<number, PeerProgress>>();
  /** Waits per fragment, in arrival order. */
  private readonly waits = new Map<number, Wait[]>();
  private waitCount = 0;
  private readonly outbox: AckTrackerAction[] = [];

  step(event: AckTrackerEvent): void {
    switch (event.kind) {
      case 'progress':
        this.onProgress(event.fragment, event.peer, event.ackedThroughOps, event.lostThroughOps);
        return;
      case 'wait':
        this.onWait(event);
        return;
      case 'tick':
        this.expire(event.nowMs);
        return;
      case 'close':
        this.expire(Number.POSITIVE_INFINITY);
        return;
    }
  }

  /** True while some wait asks about `fragment`: only then are its senders' acknowledgements reported. */
  watching(fragment: number): boolean {
    return this.waits.has(fragment);
  }

  /** Moves the answers produced so far into `into`, leaving the outbox empty. */
  takeActions(into: AckTrackerAction[]): void {
    for (const action of this.outbox) into.push(action);
    this.outbox.length = 0;
  }

  /** The earliest deadline of a wait, or Infinity. */
  nextWakeMs(): number {
    let at = Number.POSITIVE_INFINITY;
    for (const list of this.waits.values()) for (const w of list) at = Math.min(at, w.deadlineMs);
    return at;
  }

  /** Canonical text for tests: each fragment's peers and waits. */
  describe(): string {
    const lines: string[] = [];
    for (const fragment of [...new Set([...this.progress.keys(), ...this.waits.keys()])].sort(
      (a, b) => a - b,
    )) {
      const peers = [...(this.progress.get(fragment) ?? new Map<number, PeerProgress>()).entries()]
        .sort(([a], [b]) => a - b)
        .map(
          ([peer, p]) =>
            `${peer}:${p.ackedThroughOps.slice(1).join('/')}${p.lostThroughOps > 0 ? ` lost≤${p.lostThroughOps}` : ''}`,
        );
      const waits = (this.waits.get(fragment) ?? []).map(
        (w) =>
          `#${w.id}@${w.throughOps}×${w.replicas}${w.deadlineMs === Number.POSITIVE_INFINITY ? '' : ` until ${w.deadlineMs}`}`,
      );
      lines.push(`fragment ${fragment}: peers [${peers.join(' ')}] waits [${waits.join(' ')}]`);
    }
    return lines.join('\n');
  }

  private onProgress(
    fragment: number,
    peer: number,
    ackedThroughOps: readonly number[],
    lostThroughOps: number,
  ): void {
    const p = this.peerOf(fragment, peer);
    for (let l = AckLevel.Memory; l <= AckLevel.Stable; l++)
      p.ackedThroughOps[l] = Math.max(p.ackedThroughOps[l], ackedThroughOps[l] ?? 0);
    p.lostThroughOps = Math.max(p.lostThroughOps, lostThroughOps);
    const list = this.waits.get(fragment);
    if (list === undefined) return;
    let kept = 0;
    for (const w of list) {
      const reached = this.reached(w);
      if (reached >= w.replicas) this.answer(w, reached);
      else list[kept++] = w;
    }
    this.shrink(fragment, list, kept);
  }

  private onWait(event: AckTrackerEvent & { kind: 'wait' }): void {
    assert(
      Number.isInteger(event.replicas) && event.replicas >= 0 && event.replicas <= REPLICA_ACKS_MAX,
      'replicas out of range',
    );
    assert(event.throughOps >= 0, 'a position is never negative');
    const w: Wait = {
      id: event.id,
      fragment: event.fragment,
      throughOps: event.throughOps,
      level: event.level,
      replicas: event.replicas,
      deadlineMs: event.deadlineMs,
    };
    const reached = this.reached(w);
    if (reached >= w.replicas || event.nowMs >= w.deadlineMs) return this.answer(w, reached);
    if (this.waitCount >= REPLICA_WAITS_PER_WORKER_MAX) {
      this.outbox.push({ kind: 'answer', id: w.id, reached, full: true });
      return;
    }
    let list = this.waits.get(w.fragment);
    if (list === undefined) {
      list = [];
      this.waits.set(w.fragment, list);
    }
    list.push(w);
    this.waitCount++;
  }

  private expire(nowMs: number): void {
    for (const [fragment, list] of this.waits) {
      let kept = 0;
      for (const w of list) {
        if (nowMs >= w.deadlineMs) this.answer(w, this.reached(w));
        else list[kept++] = w;
      }
      this.shrink(fragment, list, kept);
    }
  }

  private shrink(fragment: number, list: Wait[], kept: number): void {
    this.waitCount -= list.length - kept;
    list.length = kept;
    if (kept > 0) return;
    this.waits.delete(fragment);
    // Nothing waits on the fragment: its progress is no longer reported, so it is forgotten too.
    this.progress.delete(fragment);
  }

  /** Peers that acknowledged `w`'s position at its level, the position not lost to a reset. */
  private reached(w: Wait): number {
    const peers = this.progress.get(w.fragment);
    if (peers === undefined) return 0;
    let count = 0;
    // Position 0: the fragment never replicated a write, so there is nothing to acknowledge.
    for (const p of peers.values()) {
      if (
        p.ackedThroughOps[w.level] >= w.throughOps &&
        (w.throughOps === 0 || p.lostThroughOps < w.throughOps)
      )
        count++;
    }
    return count;
  }

  private answer(w: Wait, reached: number): void {
    this.outbox.push({ kind: 'answer', id: w.id, reached, full: false });
  }

  private peerOf(fragment: number, peer: number): PeerProgress {
    let peers = this.progress.get(fragment);
    if (peers === undefined) {
      peers = new Map();
      this.progress.set(fragment, peers);
    }
    let p = peers.get(peer);
    if (p === undefined) {
      p = { ackedThroughOps: [0, 0, 0, 0], lostThroughOps: 0 };
      peers.set(peer, p);
    }
    return p;
  }
}

/**
 * One WAIT, WAITAOF or gated write over the fragments a connection wrote. The driver asks each
 * fragment's serving replica (for at most REPLICA_WAIT_ROUND_MS_MAX at a time) and reports each
 * answer here; a fragment short of the goal before the deadline is asked again. Done when every
 * fragment is settled: `reached` is the least count over them, `localReached` whether every one
 * reached its local level (WAITAOF's numlocal).
 */
export class WaitRound {
  private pending: number;
  private least = Number.POSITIVE_INFINITY;
  private localAll = true;

  constructor(
    fragments: number,
    /** Peers each fragment needs. */
    readonly replicas: number,
    /** Absolute wall ms; Infinity for none. */
    readonly deadlineMs: number,
    /** The answer when the connection wrote nothing: the replicas there are. */
    private readonly idleReached: number,
  ) {
    assert(Number.isInteger(fragments) && fragments >= 0, 'fragment count');
    this.pending = fragments;
  }

  /**
   * One fragment's answer: `reached` peers, `local` whether its own level was reached (a local
   * failure settles it). True when the fragment must be asked again: short of the goal, in time.
   */
  answer(reached: number, local: boolean, nowMs: number): boolean {
    assert(this.pending > 0, 'an answer for a round already settled');
    if (local && reached < this.replicas && nowMs < this.deadlineMs) return true;
    this.pending--;
    this.least = Math.min(this.least, reached);
    if (!local) this.localAll = false;
    return false;
  }

  /** A fragment whose serving replica could not be asked or did not answer: settled at nothing reached. */
  fail(): void {
    this.answer(0, false, Number.POSITIVE_INFINITY);
  }

  get done(): boolean {
    return this.pending === 0;
  }

  get reached(): number {
    return this.least === Number.POSITIVE_INFINITY ? this.idleReached : this.least;
  }

  get localReached(): boolean {
    return this.localAll;
  }

  /** Milliseconds the next ask of a fragment may wait at its serving replica. */
  askMs(nowMs: number, roundMsMax: number): number {
    return Math.max(1, Math.min(roundMsMax, this.deadlineMs - nowMs));
  }
}
