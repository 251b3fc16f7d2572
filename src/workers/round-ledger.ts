// How each sender's anti-entropy rounds go and end, for the main thread (RoundProgress after each
// page pulled and when the peer's copy's size changes, RoundReport at the end) and for the requests
// waiting on one (ReconcileNow). A round is counted when it starts; it ends complete (every page
// compared, what the peer held newer fetched), or failed: broken by the peer, abandoned by a new
// session (the sender's round timeout, an ACK timeout, a peer's reset), cut by a lost connection,
// or closed with its sender. A ReconcileNow waits for a round that started after it was asked:
// one already running when it came may have passed keys written just before. A verifying
// ReconcileNow is armed only once the peer replicates the fragment here (its SessionStart came):
// the round it waits for starts after that. Its deadline is for that round to start: once it
// runs, its end answers, however long a large copy takes, since the sender abandons a round that
// stops progressing (a fixed deadline failed every copy that took longer, at any rate).

import { truncateErrorMessage } from '../core/errors.js';
import type { SourceSize } from '../core/reconciler.js';
import type { RoundReport } from '../threads/op-codec.js';

/** One (fragment, member) sender's rounds. */
interface SenderRounds {
  /** Rounds started, the running one included. */
  seq: number;
  /** The running round's id, or 0. */
  roundId: number;
  keysPulled: number;
  bytesPulled: number;
  /** The peer's copy as the running round last heard (src/core/reconciler.ts SourceSize). */
  sourceSize: SourceSize | undefined;
  /** The peer's replication continuity this node had heard when the running round started (0: none). */
  continuity: number;
  /** The running round compares everything (no horizon). */
  whole: boolean;
}

interface RoundWaiter {
  reqId: number;
  fragment: number;
  member: number;
  /** The sender's `seq` when asked (or armed): the round awaited is a later one; Infinity until armed. */
  afterSeq: number;
  timer: NodeJS.Timeout;
}

export class RoundLedger {
  private readonly senders = new Map<string, SenderRounds>();
  private readonly waiters = new Set<RoundWaiter>();

  constructor(
    /** Every round's end, as the main thread hears it. */
    private readonly report: (report: RoundReport) => void,
    /** The answer to ReconcileNow `reqId`. */
    private readonly answer: (reqId: number, report: RoundReport) => void,
    /** A running round's counts after each page it pulled. */
    private readonly progress: (report: RoundReport) => void,
  ) {}

  /**
   * The sender started round `roundId`, `continuity` being the peer's replication run heard here
   * (0: none), `whole` when it has no horizon; a round still running is over (failed).
   */
  started(fragment: number, member: number, roundId: number, continuity: number, whole: boolean): void {
    const rounds = this.of(fragment, member);
    if (rounds.roundId !== 0) this.ended(fragment, member, false, 'superseded by a new round');
    rounds.seq++;
    rounds.roundId = roundId;
    // The round the waiters after the last one wait for: its end answers them.
    for (const w of this.waiters) {
      if (w.fragment === fragment && w.member === member && w.afterSeq < rounds.seq) clearTimeout(w.timer);
    }
    rounds.continuity = continuity;
    rounds.whole = whole;
    rounds.keysPulled = 0;
    rounds.bytesPulled = 0;
    rounds.sourceSize = undefined;
  }

  /** The running round fetched `count` keys, `bytes` with their records, from the peer. */
  pulled(fragment: number, member: number, count: number, bytes: number): void {
    const rounds = this.senders.get(key(fragment, member));
    if (rounds === undefined || rounds.roundId === 0) return;
    rounds.keysPulled += count;
    rounds.bytesPulled += bytes;
    this.progress(reportOf(fragment, member, rounds, false, ''));
  }

  /** The running round's peer said how big its copy is: reported when that changed. */
  sized(fragment: number, member: number, size: SourceSize): void {
    const rounds = this.senders.get(key(fragment, member));
    if (rounds === undefined || rounds.roundId === 0) return;
    const known = rounds.sourceSize;
    if (known !== undefined && known.keys === size.keys && known.bytes === size.bytes) return;
    rounds.sourceSize = size;
    this.progress(reportOf(fragment, member, rounds, false, ''));
  }

  /** The running round, if any, ended: reported (and returned), and answered to each request waiting for it. */
  ended(fragment: number, member: number, ok: boolean, reason: string): RoundReport | undefined {
    const rounds = this.senders.get(key(fragment, member));
    if (rounds === undefined || rounds.roundId === 0) return undefined;
    const report = reportOf(fragment, member, rounds, ok, ok ? '' : truncateErrorMessage(reason));
    rounds.roundId = 0;
    this.report(report);
    for (const w of this.waiters) {
      if (w.fragment === fragment && w.member === member && w.afterSeq < report.roundSeq)
        this.settle(w, report);
    }
    return report;
  }

  /**
   * Waits for the next round of the sender to end (the caller asks the sender for one), answering
   * a failure when it has not started within `timeoutMs`. Unless `armed`, no round counts before
   * `arm`.
   */
  wait(reqId: number, fragment: number, member: number, timeoutMs: number, armed = true): void {
    const afterSeq = armed ? this.of(fragment, member).seq : Number.POSITIVE_INFINITY;
    const waiter: RoundWaiter = { reqId, fragment, member, afterSeq, timer: undefined! };
    waiter.timer = setTimeout(() => {
      const reason =
        waiter.afterSeq === Number.POSITIVE_INFINITY
          ? `the peer did not replicate the fragment here within ${timeoutMs} ms`
          : `no round started within ${timeoutMs} ms`;
      this.settle(waiter, failure(fragment, member, reason));
    }, timeoutMs);
    this.waiters.add(waiter);
  }

  /** The waits not armed yet for the sender count the rounds it starts from now on. */
  arm(fragment: number, member: number): void {
    const seq = this.of(fragment, member).seq;
    for (const w of this.waiters) {
      if (w.fragment === fragment && w.member === member && w.afterSeq === Number.POSITIVE_INFINITY)
        w.afterSeq = seq;
    }
  }

  /** The peer cannot serve a round (it holds no copy): the waits not armed yet fail with `reason`. */
  refused(fragment: number, member: number, reason: string): void {
    for (const w of this.waiters) {
      if (w.fragment === fragment && w.member === member && w.afterSeq === Number.POSITIVE_INFINITY)
        this.settle(w, failure(fragment, member, reason));
    }
  }

  /** The sender is gone (its peer left the replica list, or the fragment was dropped). */
  closed(fragment: number, member: number, reason: string): void {
    this.ended(fragment, member, false, reason);
    this.senders.delete(key(fragment, member));
    for (const w of this.waiters) {
      if (w.fragment === fragment && w.member === member) this.settle(w, failure(fragment, member, reason));
    }
  }

  /** The worker is closing: every request waiting is answered as failed. */
  close(): void {
    for (const w of this.waiters) this.settle(w, failure(w.fragment, w.member, 'the worker is closing'));
  }

  private settle(waiter: RoundWaiter, report: RoundReport): void {
    clearTimeout(waiter.timer);
    this.waiters.delete(waiter);
    this.answer(waiter.reqId, report);
  }

  private of(fragment: number, member: number): SenderRounds {
    const k = key(fragment, member);
    let rounds = this.senders.get(k);
    if (rounds === undefined) {
      rounds = {
        seq: 0,
        roundId: 0,
        keysPulled: 0,
        bytesPulled: 0,
        sourceSize: undefined,
        continuity: 0,
        whole: false,
      };
      this.senders.set(k, rounds);
    }
    return rounds;
  }
}

function reportOf(
  fragment: number,
  member: number,
  rounds: SenderRounds,
  ok: boolean,
  reason: string,
): RoundReport {
  const { seq: roundSeq, roundId, keysPulled, bytesPulled, sourceSize, continuity, whole } = rounds;
  return {
    fragment,
    member,
    roundSeq,
    roundId,
    ok,
    keysPulled,
    bytesPulled,
    sourceSize,
    continuity,
    whole,
    reason,
  };
}

/** The answer of a request that no round ended for. */
function failure(fragment: number, member: number, reason: string): RoundReport {
  return {
    fragment,
    member,
    roundSeq: 0,
    roundId: 0,
    ok: false,
    keysPulled: 0,
    bytesPulled: 0,
    sourceSize: undefined,
    continuity: 0,
    whole: false,
    reason,
  };
}

function key(fragment: number, member: number): string {
  return `${member}/${fragment}`;
}
