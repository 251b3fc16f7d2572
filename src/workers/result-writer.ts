// The worker's end of the result ring: every record the worker sends the main thread is written
// here — replies, header-only replies gathered into Acks records, errors, scan pages, peer frames,
// background-pool requests — and made visible by one publish (one wake-up of the main thread).

import { copyBytes, copyRange, writeU32LE } from '../core/bytes.js';
import { ErrorKind, truncateErrorMessage } from '../core/errors.js';
import type { FragmentOp } from '../core/fragment.js';
import { RESULT_ACKS_MAX } from '../core/limits.js';
import { Reply } from '../core/ops.js';
import {
  PEER_HEADER_BYTES,
  type PoolSpanRequest,
  poolSpanRequestBytes,
  RESULT_HEADER_BYTES,
  ResultKind,
  type RoundReport,
  resultRecordBytes,
  roundReportBytes,
  type ScanEntry,
  scanPageBytes,
  writeAcksHeader,
  writeDetail,
  writePeerHeader,
  writePoolSpanRequest,
  writeResultHeader,
  writeRoundReport,
  writeScanPage,
} from '../threads/op-codec.js';
import type { RingOutbox } from '../threads/ring-outbox.js';

/** Where an op's reply is written: the result ring, or a worker port's handler (src/workers/resp-port.ts). */
export interface OpReplies {
  record(reply: Reply, detail: number, reqId: number, record: Uint8Array, headerOnly: boolean): void;
  text(status: number, detail: number, reqId: number, text: string): void;
  ack(reply: Reply, detail: number, reqId: number): void;
}

/** Writes the reply the actor set on `op`: with its record, its text, or its status alone. */
export function writeOpReply(op: FragmentOp, to: OpReplies, replicasReached = 0): void {
  const detail = writeDetail(op.prior, replicasReached);
  const record = op.replyRecord;
  if (record !== undefined) {
    to.record(op.reply, detail, op.reqId, record, op.headerOnly || op.reply === Reply.Superseded);
  } else if (op.text !== '') {
    to.text(op.reply, detail, op.reqId, op.text);
  } else {
    to.ack(op.reply, detail, op.reqId);
  }
}

export class ResultWriter implements OpReplies {
  /** Header-only replies not yet written: one status and detail, their reqIds (`ack`). */
  private readonly ackIds = new Array<number>(RESULT_ACKS_MAX).fill(0);
  private ackCount = 0;
  private ackReply: Reply = Reply.Applied;
  private ackDetail = 0;
  private publishScheduled = false;
  private readonly publishTask = (): void => {
    this.publishScheduled = false;
    this.publish();
  };

  constructor(private readonly outbox: RingOutbox) {}

  /**
   * A header-only reply: gathered with the ones before it of the same status and detail into one
   * Acks record, written when the status changes, the record is full, or results are published.
   */
  ack(reply: Reply, detail: number, reqId: number): void {
    if (this.ackCount > 0 && (reply !== this.ackReply || detail !== this.ackDetail)) this.writeAcks();
    this.ackReply = reply;
    this.ackDetail = detail;
    this.ackIds[this.ackCount++] = reqId;
    if (this.ackCount === RESULT_ACKS_MAX) this.writeAcks();
  }

  /** A reply carrying a record: whole, or its header and node id only. */
  record(reply: Reply, detail: number, reqId: number, record: Uint8Array, headerOnly: boolean): void {
    const n = resultRecordBytes(record, headerOnly);
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + n);
    const buf = this.outbox.buffer;
    copyRange(record, 0, n, buf, writeResultHeader(buf, at, reply, detail, reqId));
    this.outbox.commit();
  }

  /** A result whose payload is UTF-8 text (an error message, or a health report). */
  text(status: number, detail: number, reqId: number, text: string): void {
    const n = Buffer.byteLength(text);
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + n);
    const buf = this.outbox.buffer;
    buf.write(text, writeResultHeader(buf, at, status, detail, reqId), n, 'utf8');
    this.outbox.commit();
  }

  error(kind: ErrorKind, reqId: number, message: string): void {
    this.text(ResultKind.Error, kind, reqId, truncateErrorMessage(message));
  }

  /**
   * The answer to Close, the worker's last result, after every reply gathered so far: Closed, or
   * the store's `failure` to close.
   */
  closed(reqId: number, failure: string): void {
    this.writeAcks();
    if (failure !== '') return this.error(ErrorKind.Storage, reqId, failure);
    const at = this.outbox.reserve(RESULT_HEADER_BYTES);
    writeResultHeader(this.outbox.buffer, at, ResultKind.Closed, 0, reqId);
    this.outbox.commit();
  }

  scanPage(reqId: number, done: boolean, resumeKey: Uint8Array | undefined, entries: ScanEntry[]): void {
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + scanPageBytes(entries, resumeKey));
    const buf = this.outbox.buffer;
    writeScanPage(buf, writeResultHeader(buf, at, ResultKind.ScanPage, 0, reqId), done, resumeKey, entries);
    this.outbox.commit();
  }

  /** A frame for a peer; it leaves at the next publish, or promptly when sent outside a turn. */
  peerFrame(member: number, envelope: Uint8Array): void {
    const at = this.outbox.reserve(PEER_HEADER_BYTES + envelope.length);
    const buf = this.outbox.buffer;
    copyBytes(buf, writePeerHeader(buf, at, ResultKind.PeerFrame, 0, member), envelope);
    this.outbox.commit();
    this.schedulePublish();
  }

  /** Asks the main thread to close a peer's connection, saying why. */
  peerClose(member: number, reason: string): void {
    const text = truncateErrorMessage(reason);
    const n = Buffer.byteLength(text);
    const at = this.outbox.reserve(PEER_HEADER_BYTES + n);
    const buf = this.outbox.buffer;
    buf.write(text, writePeerHeader(buf, at, ResultKind.PeerClose, 0, member), n, 'utf8');
    this.outbox.commit();
    this.schedulePublish();
  }

  /** Asks the main thread to read a span in the background pool (answered as PoolSpanResult). */
  poolSpanRequest(taskId: number, request: PoolSpanRequest): void {
    const at = this.outbox.reserve(poolSpanRequestBytes(request));
    writePoolSpanRequest(this.outbox.buffer, at, taskId, request);
    this.outbox.commit();
    this.schedulePublish();
  }

  /**
   * How a sender's anti-entropy round ended: news for the main thread (ResultKind.RoundReport), or
   * the answer to a ReconcileNow (ResultKind.RoundAnswer, under `reqId`); or how far a running
   * round got (ResultKind.RoundProgress).
   */
  roundReport(
    kind: typeof ResultKind.RoundReport | typeof ResultKind.RoundAnswer | typeof ResultKind.RoundProgress,
    reqId: number,
    report: RoundReport,
  ): void {
    const at = this.outbox.reserve(roundReportBytes(report));
    writeRoundReport(this.outbox.buffer, at, kind, reqId, report);
    this.outbox.commit();
    this.schedulePublish();
  }

  /** Writes the gathered replies, then makes every result written visible to the main thread. */
  publish(): void {
    this.writeAcks();
    this.outbox.publish();
  }

  /** Records written outside a ring batch (timers, store callbacks) still leave promptly. */
  private schedulePublish(): void {
    if (this.publishScheduled) return;
    this.publishScheduled = true;
    queueMicrotask(this.publishTask);
  }

  private writeAcks(): void {
    const count = this.ackCount;
    if (count === 0) return;
    this.ackCount = 0;
    const ids = this.ackIds;
    if (count === 1) {
      const at = this.outbox.reserve(RESULT_HEADER_BYTES);
      writeResultHeader(this.outbox.buffer, at, this.ackReply, this.ackDetail, ids[0]);
      this.outbox.commit();
      return;
    }
    const at = this.outbox.reserve(RESULT_HEADER_BYTES + 4 * count);
    const buf = this.outbox.buffer;
    let p = writeAcksHeader(buf, at, this.ackReply, this.ackDetail, count);
    for (let i = 0; i < count; i++, p += 4) writeU32LE(buf, p, ids[i]);
    this.outbox.commit();
  }
}
