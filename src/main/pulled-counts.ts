// What anti-entropy pulled into each fragment's copy on this node since the node opened it: the
// sum of its rounds toward every peer, from the workers' round reports (RoundProgress after each
// page pulled, RoundReport at the end), for `GET /cluster/moves`. A report carries its round's
// counts so far, so each adds what grew since the last report of the same round. Reports also carry
// how big the peer said its copy is, from which `leftToPull` estimates what the copy has left.

import type { SourceSize } from '../core/reconciler.js';
import type { RoundReport } from '../threads/op-codec.js';

export interface PulledCount {
  keys: number;
  bytes: number;
}

/** What was pulled into a copy, and the largest copy a peer said it pulled from (undefined: none said yet). */
export interface PulledInto extends PulledCount {
  source: SourceSize | undefined;
}

/** One (fragment, member) sender's round last reported, and what it had pulled then. */
interface RoundSeen extends PulledCount {
  roundSeq: number;
}

interface FragmentPulls extends PulledCount {
  rounds: Map<number, RoundSeen>;
  /** Each member's copy as the latest report that said it had it (kept across rounds). */
  sources: Map<number, SourceSize>;
}

export class PulledCounts {
  private readonly fragments = new Map<number, FragmentPulls>();

  /** A round report of a sender of this node's: what grew since that round's last report counts. */
  add(report: RoundReport): void {
    // Answers to requests that no round ended for carry no round.
    if (report.roundSeq === 0) return;
    let pulls = this.fragments.get(report.fragment);
    if (pulls === undefined) {
      pulls = { keys: 0, bytes: 0, rounds: new Map(), sources: new Map() };
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
    if (report.sourceSize !== undefined) pulls.sources.set(report.member, report.sourceSize);
  }

  /**
   * What the fragment's rounds pulled since this node opened it (zero when none did), and the
   * largest copy (most keys) a peer said it holds.
   */
  of(fragment: number): PulledInto {
    const pulls = this.fragments.get(fragment);
    let source: SourceSize | undefined;
    for (const size of pulls?.sources.values() ?? []) {
      if (source === undefined || size.keys > source.keys) source = size;
    }
    return { keys: pulls?.keys ?? 0, bytes: pulls?.bytes ?? 0, source };
  }

  /** The fragment was dropped here: a copy opened again counts from zero. */
  forget(fragment: number): void {
    this.fragments.delete(fragment);
  }
}

/**
 * What a copy has left to pull, estimated; undefined until a source said its size. Keys: the
 * source's less those pulled. Bytes: those keys at the average size of the keys pulled so far (the
 * source's bytes before any was pulled). The source's key count is exact (lmdb, memory; LevelDB's
 * is an estimate) where its bytes are not (lmdb counts pages), and the average is exact for what
 * was pulled, so with records of like sizes done + left comes within a few per cent of the
 * source's size. It reads low when the copy's records differ in size along the key order (the
 * average is of those pulled first, in key order), and when keys are pulled twice (from two
 * sources); keys the copy gets by replication meanwhile are never pulled, so they stay "left"
 * until the copy is Serving.
 */
export function leftToPull(pulled: PulledInto): PulledCount | undefined {
  const source = pulled.source;
  if (source === undefined) return undefined;
  const keys = Math.max(0, source.keys - pulled.keys);
  const bytes = pulled.keys === 0 ? source.bytes : Math.round((keys * pulled.bytes) / pulled.keys);
  return { keys, bytes };
}
