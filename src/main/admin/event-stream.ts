// `GET /cluster/events`: the node's cluster events (Cluster.events, a bounded EventLog) as
// Server-Sent Events. A reader first gets the kept events after the one it names (Last-Event-ID, or
// `?after=`), then each new one as it is appended. Nothing is queued per reader but what its socket
// holds: a reader whose socket holds more than CLUSTER_EVENT_READER_QUEUE_BYTES_MAX is ended with
// an `overflow` event naming the sequence to resume from, and resumes while the log still keeps it.
//
//   id: 12                         one event; the data is one line of JSON
//   event: MemberUnreachable
//   data: {"sequence":12,"kind":"MemberUnreachable","at":"2025-…Z","member":{…},"memberSequence":9}
//
//   event: overflow                no id: a client's Last-Event-ID stays the last event it got
//   data: {"reason":"slow","lost":0,"resumeFrom":13}
//
//   : keepalive                    a comment every EVENT_STREAM_KEEPALIVE_MS

import type { ServerResponse } from 'node:http';
import type { EventLog, LoggedEvent } from '../../core/event-log.js';
import { CLUSTER_EVENT_READER_QUEUE_BYTES_MAX, CLUSTER_EVENT_READERS_MAX } from '../../core/limits.js';
import type { ClusterEventData } from '../mesh/cluster.js';

/** How often every stream gets a comment line, so proxies and load balancers keep an idle one open. */
export const EVENT_STREAM_KEEPALIVE_MS = 15_000;
/**
 * How long a reader ended for falling behind may make no progress taking its last bytes (the
 * overflow event) before its connection is destroyed: a reader that stopped reading holds a socket
 * and its queued bytes no longer than this.
 */
export const EVENT_STREAM_CUT_GRACE_MS = 10_000;

/**
 * Why a reader gets an `overflow` event: events after the one it named slid out of the log
 * (`lost`); its socket did not drain and the stream ends (`slow`); it named a sequence past the
 * newest, from an earlier run of the node, whose numbering restarted at 1 (`restarted`).
 */
export type OverflowReason = 'lost' | 'slow' | 'restarted';

export interface Overflow {
  reason: OverflowReason;
  /** Events the reader cannot get from this node any more. */
  lost: number;
  /** The first event it gets next: after this overflow, or by resuming after `resumeFrom - 1`. */
  resumeFrom: number;
}

const STREAM_HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-store',
  // nginx would otherwise buffer the stream.
  'X-Accel-Buffering': 'no',
};

const KEEPALIVE_CHUNK = ': keepalive\n\n';

/** One event as its SSE lines. */
export function eventChunk(event: LoggedEvent<ClusterEventData>): string {
  const data = {
    sequence: event.sequence,
    kind: event.type,
    at: new Date(event.atMs).toISOString(),
    ...event.data,
  };
  return `id: ${event.sequence}\nevent: ${event.type}\ndata: ${JSON.stringify(data)}\n\n`;
}

function overflowChunk(overflow: Overflow): string {
  return `event: overflow\ndata: ${JSON.stringify(overflow)}\n\n`;
}

/**
 * The open streams of one node's cluster events. Every open reader has been sent (or queued) every
 * event up to the log's newest: the replay and the subscription run in one turn, and a new event
 * goes to every reader as it is appended, encoded once.
 */
export class ClusterEventStreams {
  private readonly readers = new Set<ServerResponse>();
  private unsubscribe: (() => void) | undefined;
  private keepalive: NodeJS.Timeout | undefined;

  constructor(
    private readonly log: EventLog<ClusterEventData>,
    private readonly keepaliveMs = EVENT_STREAM_KEEPALIVE_MS,
  ) {}

  /** Streams open now. */
  get count(): number {
    return this.readers.size;
  }

  /** Whether one more reader may open a stream. */
  get full(): boolean {
    return this.readers.size >= CLUSTER_EVENT_READERS_MAX;
  }

  /**
   * Answers `res` with the stream: the kept events after `after` (every kept event when undefined),
   * an `overflow` first when some after it are lost, then each new event until the reader goes.
   */
  open(res: ServerResponse, after: number | undefined): void {
    res.writeHead(200, STREAM_HEADERS);
    res.flushHeaders();
    const last = this.log.lastSequence;
    const restarted = after !== undefined && after > last;
    const { events, lost } = this.log.since(restarted ? 0 : (after ?? 0));
    if (restarted) {
      res.write(
        overflowChunk({
          reason: 'restarted',
          lost: this.log.firstSequence - 1,
          resumeFrom: this.log.firstSequence,
        }),
      );
    } else if (after !== undefined && lost > 0) {
      res.write(overflowChunk({ reason: 'lost', lost, resumeFrom: this.log.firstSequence }));
    }
    for (const event of events) {
      if (!this.write(res, eventChunk(event), event.sequence)) return;
    }
    this.readers.add(res);
    res.once('close', () => this.remove(res));
    if (this.unsubscribe === undefined) {
      this.unsubscribe = this.log.subscribe((event) => this.broadcast(event));
      this.keepalive = setInterval(() => this.sendKeepalive(), this.keepaliveMs);
      this.keepalive.unref();
    }
  }

  /** Ends every stream (the admin server is closing). */
  closeAll(): void {
    for (const res of [...this.readers]) {
      this.remove(res);
      res.end();
    }
  }

  private broadcast(event: LoggedEvent<ClusterEventData>): void {
    const chunk = eventChunk(event);
    for (const res of [...this.readers]) this.write(res, chunk, event.sequence);
  }

  private sendKeepalive(): void {
    const next = this.log.lastSequence + 1;
    for (const res of [...this.readers]) this.write(res, KEEPALIVE_CHUNK, next);
  }

  /**
   * Queues `chunk` (which would carry event `sequence`, or precedes it) unless the reader's socket
   * already holds more than its bound: then ends the stream with an overflow naming `sequence` to
   * resume from. Returns whether the stream is still open.
   */
  private write(res: ServerResponse, chunk: string, sequence: number): boolean {
    if (res.writableLength <= CLUSTER_EVENT_READER_QUEUE_BYTES_MAX) {
      res.write(chunk);
      return true;
    }
    this.remove(res);
    res.setTimeout(EVENT_STREAM_CUT_GRACE_MS, () => res.destroy());
    res.end(overflowChunk({ reason: 'slow', lost: 0, resumeFrom: sequence }));
    return false;
  }

  private remove(res: ServerResponse): void {
    if (!this.readers.delete(res) || this.readers.size > 0) return;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    clearInterval(this.keepalive);
    this.keepalive = undefined;
  }
}
