// What anti-entropy pulled into each fragment's copy on this node since the node opened it: the
// sum of its rounds toward every peer, from the workers' round reports (RoundProgress after each
// page pulled, RoundReport at the end), for `GET /cluster/moves`. A report carries its round's
// counts so far, so each adds what grew since the last report of the same round.

import type { RoundReport } from '../threads/op-codec.js';

export interface PulledCount {
  keys: number;
  bytes: number;
}

/** One (fragment, member) sender's round last reported, and what it had pulled then. */
interface RoundSeen extends PulledCount {
  roundSeq: number;
}

interface FragmentPulls extends PulledCount {
  rounds: Map<number, RoundSeen>;
}

export class PulledCounts {
  private readonly fragments = new Map<number, FragmentPulls>();

  /** A round report of a sender of this node's: what grew since that round's last report counts. */
  add(report: RoundReport): void {
    // Answers to requests that no round ended for carry no round.
    if (report.roundSeq === 0) return;
    let pulls = this.fragments.get(report.fragment);
    if (pulls === undefined) {
      pulls = { keys: 0, bytes: 0, rounds: new Map() };
      this.fragments.set(report.fragment, pulls);
    }
    const seen = pulls.rounds.get(report.member);
    // A restarted worker counts its senders' rounds from 1 again: smaller counts are a new round.
    const sameRound =
      seen !== undefined &&
      seen.roundSeq === report.roundSeq &&
      seen.keys <= report.keysPulled &&
      seen.bytes <= report.bytesPulled;
    pulls.keys += report.keysPulled - (sameRound ? seen.keys : 0);
    pulls.bytes += report.bytesPulled - (sameRound ? seen.bytes : 0);
    pulls.rounds.set(report.member, {
      roundSeq: report.roundSeq,
      keys: report.keysPulled,
      bytes: report.bytesPulled,
    });
  }

  /** What the fragment's rounds pulled since this node opened it (zero when none did). */
  of(fragment: number): PulledCount {
    const pulls = this.fragments.get(fragment);
    return { keys: pulls?.keys ?? 0, bytes: pulls?.bytes ?? 0 };
  }

  /** The fragment was dropped here: a copy opened again counts from zero. */
  forget(fragment: number): void {
    this.fragments.delete(fragment);
  }
}
