// The run engine: keeps `pipeline` operations in flight on each of `connections` connections and
// measures them. Each connection owns `pipeline` slots; an operation lives in a slot from its first
// request to its last reply, and every per-operation field is a typed array indexed by slot, so the
// hot path allocates nothing.
//
// Closed loop (no --rate): a slot starts its next operation as soon as its last one completes;
// latency runs from the send. This is what redis-benchmark measures, and it hides queueing: a slow
// reply delays the requests that would have been sent meanwhile (coordinated omission).
//
// Open loop (--rate R): operation k is due at t0 + k/R whatever happened before, and its latency runs
// from that intended time. A timer issues every due operation on a free slot (connections taken in
// turn); when no slot is free the due operations wait, and a slot freed by a reply takes the next
// one at once. A target that cannot keep up thus shows growing latency (queueing included), and
// the report compares the achieved rate with R. The time from the actual send is kept apart, as
// "service time". Timers fire at ~1 ms granularity, so sends go out in bursts of R/1000; the
// latency includes that up to ~1 ms of send lateness, which is the client's, as in wrk2.

import { performance } from 'node:perf_hooks';
import { assert } from '../../src/core/assert.js';
import { Connection, type ConnectionSink, type Target } from './client.js';
import { LatencyHistogram } from './histogram.js';
import { REPLY_ERROR, REPLY_NULL } from './reply-parser.js';
import type { RequestTemplates } from './request-writer.js';
import { OP_INSERT, OP_KINDS, OP_READ, OP_RMW, OP_SCAN, type OpChoice, type OpSource } from './workloads.js';

/** Wait before reopening a lost connection while the run goes on. */
export const RECONNECT_DELAY_MS = 200;
/** How often request timeouts are checked. */
const TIMEOUT_CHECK_INTERVAL_MS = 100;
/** Width of the throughput series' buckets. */
export const SERIES_INTERVAL_MS = 1000;

export interface PhaseSpec {
  connections: number;
  pipeline: number;
  /** Operations to complete; undefined: run for durationMs. */
  ops: number | undefined;
  durationMs: number | undefined;
  /** Open loop: operations per second over all connections; undefined: closed loop. */
  rate: number | undefined;
  /** A request unanswered this long fails its connection's in-flight requests as `timeout`. */
  timeoutMs: number;
  /** Also keep a latency histogram per series bucket (`seriesLatency`), for percentiles per second. */
  seriesLatency?: boolean;
}

export interface ErrorCount {
  count: number;
  /** The first message of this kind. */
  sample: string;
}

export interface PhaseResult {
  /** Wall-clock start (ms since the epoch) and length, from the first send to the last reply. */
  startedAtMs: number;
  elapsedMs: number;
  /** Per op kind (OP_*): successes (in the histogram), failures, and missing keys read. */
  histograms: LatencyHistogram[];
  failed: Float64Array;
  misses: Float64Array;
  /** Open loop: latency from the actual send (the histograms measure from the intended time). */
  service: LatencyHistogram | undefined;
  seriesOps: number[];
  seriesErrors: number[];
  /** With `seriesLatency`: the successes' latencies per series bucket (empty otherwise). */
  seriesLatency: LatencyHistogram[];
  errors: Map<string, ErrorCount>;
  /** Operations started, and (open loop) due by the schedule. */
  sentOps: number;
  intendedOps: number;
}

/** A phase's result before anything ran; `openLoop`: with a service-time histogram. */
export function emptyPhaseResult(openLoop: boolean): PhaseResult {
  return {
    startedAtMs: 0,
    elapsedMs: 0,
    histograms: Array.from({ length: OP_KINDS }, () => new LatencyHistogram()),
    failed: new Float64Array(OP_KINDS),
    misses: new Float64Array(OP_KINDS),
    service: openLoop ? new LatencyHistogram() : undefined,
    seriesOps: [],
    seriesErrors: [],
    seriesLatency: [],
    errors: new Map(),
    sentOps: 0,
    intendedOps: 0,
  };
}

/** What a progress line reads of a running phase. */
export interface PhaseProgress {
  progress(): { elapsedMs: number; completed: number; errors: number; inFlight: number };
}

export class Driver implements ConnectionSink, PhaseProgress {
  private readonly conns: Connection[] = [];
  private readonly pipeline: number;
  // Per slot (slot = connection index × pipeline + j).
  private readonly kind: Uint8Array;
  /** 1 while an rmw operation waits for its SET's reply. */
  private readonly stage: Uint8Array;
  private readonly key: Float64Array;
  /** Latency origin: the send (closed loop) or the intended send (open loop). */
  private readonly startMs: Float64Array;
  private readonly sentMs: Float64Array;
  /** Free slots of connection c: freeSlots[c × pipeline + 0 .. freeCount[c]). */
  private readonly freeSlots: Int32Array;
  private readonly freeCount: Int32Array;
  private freeTotal = 0;
  private nextConn = 0;

  private readonly choice: OpChoice = { kind: 0, key: 0, count: 1 };
  private readonly result: PhaseResult;
  private t0 = 0;
  /** Operations started, and those completed (success or failure). */
  private issued = 0;
  private completed = 0;
  private inFlight = 0;
  private errorTotal = 0;
  /** False once the duration is over or every operation is issued: slots then go idle. */
  private issuing = false;
  private readonly opsTotal: number;
  private readonly msPerOp: number;
  private timers: NodeJS.Timeout[] = [];
  private scheduleTimer: NodeJS.Timeout | undefined;
  private finished: (() => void) | undefined;

  constructor(
    private readonly spec: PhaseSpec,
    target: Target,
    templates: RequestTemplates,
    private readonly source: OpSource,
  ) {
    assert(spec.connections >= 1 && spec.pipeline >= 1, 'a run needs connections and a pipeline');
    assert(
      (spec.ops === undefined) !== (spec.durationMs === undefined),
      'a run has either ops or a duration',
    );
    this.pipeline = spec.pipeline;
    const slots = spec.connections * spec.pipeline;
    this.kind = new Uint8Array(slots);
    this.stage = new Uint8Array(slots);
    this.key = new Float64Array(slots);
    this.startMs = new Float64Array(slots);
    this.sentMs = new Float64Array(slots);
    this.freeSlots = new Int32Array(slots);
    this.freeCount = new Int32Array(spec.connections);
    for (let c = 0; c < spec.connections; c++) {
      this.conns.push(new Connection(c, target, templates, spec.pipeline, this));
      for (let j = spec.pipeline - 1; j >= 0; j--) this.releaseSlot(c * spec.pipeline + j);
    }
    const rate = spec.rate;
    this.msPerOp = rate === undefined ? 0 : 1000 / rate;
    const fromDuration =
      rate === undefined || spec.durationMs === undefined
        ? Infinity
        : Math.floor((spec.durationMs * rate) / 1000);
    this.opsTotal = spec.ops ?? fromDuration;
    this.result = emptyPhaseResult(rate !== undefined);
  }

  /** Counters for a progress line. */
  progress(): { elapsedMs: number; completed: number; errors: number; inFlight: number } {
    const elapsedMs = this.t0 === 0 ? 0 : performance.now() - this.t0;
    return { elapsedMs, completed: this.completed, errors: this.errorTotal, inFlight: this.inFlight };
  }

  /** Opens every connection (rejecting if one cannot be opened), runs the phase, closes them. */
  async run(): Promise<PhaseResult> {
    try {
      await Promise.all(this.conns.map((c) => c.open()));
    } catch (error) {
      for (const c of this.conns) c.close();
      throw error;
    }
    const done = new Promise<void>((resolve) => {
      this.finished = resolve;
    });
    this.t0 = performance.now();
    this.result.startedAtMs = Date.now();
    this.issuing = this.opsTotal > 0;
    const { durationMs } = this.spec;
    if (durationMs !== undefined) this.timers.push(setTimeout(() => this.stopIssuing(), durationMs));
    this.timers.push(setInterval(() => this.checkTimeouts(), TIMEOUT_CHECK_INTERVAL_MS));
    for (const c of this.conns) this.onReady(c);
    if (this.spec.rate !== undefined) this.schedule();
    this.finishIfIdle();
    await done;
    return this.result;
  }

  // ── Issuing ───────────────────────────────────────────────────────────────────────────────

  /** Open loop: operations due by `nowMs` (the k-th is due at t0 + k × msPerOp). */
  private due(nowMs: number): number {
    return Math.min(this.opsTotal, Math.floor((nowMs - this.t0) / this.msPerOp) + 1);
  }

  /** Whether a freed slot should start another operation now. */
  private wantsMore(nowMs: number): boolean {
    if (!this.issuing) return false;
    if (this.spec.rate === undefined) return this.issued < this.opsTotal;
    return this.issued < this.due(nowMs);
  }

  /** Starts the next operation in `slot`; the caller flushes the connection. */
  private start(slot: number, startMs: number, nowMs: number): void {
    const choice = this.choice;
    this.source.next(choice);
    const conn = this.conns[(slot / this.pipeline) | 0];
    const kind = choice.kind;
    this.kind[slot] = kind;
    this.stage[slot] = 0;
    this.key[slot] = choice.key;
    this.startMs[slot] = startMs;
    this.sentMs[slot] = nowMs;
    if (kind === OP_SCAN) conn.writer.mget(choice.key, choice.count);
    else if (kind === OP_READ || kind === OP_RMW) conn.writer.get(choice.key);
    else conn.writer.set(choice.key);
    conn.push(slot);
    this.issued++;
    this.inFlight++;
    if (this.issued === this.opsTotal) this.issuing = false;
  }

  /** A connection became ready: fill its free slots (closed loop; the open loop's timer fills them). */
  private onReady(conn: Connection): void {
    if (this.spec.rate !== undefined) return;
    const c = conn.index;
    const base = c * this.pipeline;
    while (this.freeCount[c] > 0 && this.wantsMore(0)) {
      const now = performance.now();
      this.freeTotal--;
      this.start(this.freeSlots[base + --this.freeCount[c]], now, now);
    }
    conn.flush();
  }

  /** A free slot on a ready connection, connections taken in turn; -1 when none. */
  private takeFreeSlot(): number {
    if (this.freeTotal === 0) return -1;
    const n = this.conns.length;
    for (let tries = 0; tries < n; tries++) {
      const c = this.nextConn;
      this.nextConn = c + 1 === n ? 0 : c + 1;
      if (this.freeCount[c] > 0 && this.conns[c].state === 'ready') {
        this.freeTotal--;
        return this.freeSlots[c * this.pipeline + --this.freeCount[c]];
      }
    }
    return -1;
  }

  private releaseSlot(slot: number): void {
    const c = (slot / this.pipeline) | 0;
    this.freeSlots[c * this.pipeline + this.freeCount[c]++] = slot;
    this.freeTotal++;
  }

  /** Open loop: issues every due operation that has a free slot, then sleeps until the next is due. */
  private readonly schedule = (): void => {
    this.scheduleTimer = undefined;
    if (!this.issuing) return;
    let now = performance.now();
    const due = this.due(now);
    let sent = false;
    while (this.issued < due) {
      const slot = this.takeFreeSlot();
      if (slot < 0) break;
      this.start(slot, this.t0 + this.issued * this.msPerOp, now);
      sent = true;
    }
    if (sent) for (const c of this.conns) c.flush();
    if (!this.issuing) return;
    now = performance.now();
    const waitMs = this.t0 + this.issued * this.msPerOp - now;
    this.scheduleTimer = setTimeout(this.schedule, Math.max(1, waitMs));
  };

  // ── Completion ────────────────────────────────────────────────────────────────────────────

  onReply(conn: Connection, slot: number, status: number, nulls: number, nowMs: number): void {
    const kind = this.kind[slot];
    if (kind === OP_RMW && this.stage[slot] === 0 && status !== REPLY_ERROR) {
      // The read half is in: write the same key back, on the same connection.
      this.stage[slot] = 1;
      if (status === REPLY_NULL) this.result.misses[kind]++;
      conn.writer.set(this.key[slot]);
      conn.push(slot);
      return;
    }
    if (status === REPLY_ERROR) this.fail(slot, errorKind(conn.parser.errorText()), conn.parser.errorText());
    else this.succeed(slot, status, nulls, nowMs);
    this.inFlight--;
    if (this.wantsMore(nowMs)) {
      const now = performance.now();
      this.start(slot, this.spec.rate === undefined ? now : this.t0 + this.issued * this.msPerOp, now);
    } else {
      this.releaseSlot(slot);
      this.finishIfIdle();
    }
  }

  private succeed(slot: number, status: number, nulls: number, nowMs: number): void {
    const kind = this.kind[slot];
    const r = this.result;
    r.histograms[kind].recordMs(nowMs - this.startMs[slot]);
    if (this.spec.seriesLatency === true) this.bucketHistogram(nowMs).recordMs(nowMs - this.startMs[slot]);
    r.service?.recordMs(nowMs - this.sentMs[slot]);
    if (status === REPLY_NULL && kind === OP_READ) r.misses[kind]++;
    else if (kind === OP_SCAN) r.misses[kind] += nulls;
    if (kind === OP_INSERT) this.source.inserted(this.key[slot]);
    this.completed++;
    this.count(r.seriesOps, nowMs);
  }

  private fail(slot: number, kind: string, message: string): void {
    const op = this.kind[slot];
    this.result.failed[op]++;
    if (op === OP_INSERT) this.source.inserted(this.key[slot]);
    this.completed++;
    this.noteError(kind, message);
  }

  private noteError(kind: string, message: string): void {
    const errors = this.result.errors;
    const entry = errors.get(kind);
    if (entry === undefined) errors.set(kind, { count: 1, sample: message });
    else entry.count++;
    this.errorTotal++;
    this.count(this.result.seriesErrors, performance.now());
  }

  private count(series: number[], nowMs: number): void {
    const bucket = this.bucketOf(nowMs);
    while (series.length <= bucket) series.push(0);
    series[bucket]++;
  }

  private bucketOf(nowMs: number): number {
    return Math.max(0, Math.floor((nowMs - this.t0) / SERIES_INTERVAL_MS));
  }

  /** The latency histogram of `nowMs`'s series bucket (one allocation per bucket, not per operation). */
  private bucketHistogram(nowMs: number): LatencyHistogram {
    const series = this.result.seriesLatency;
    const bucket = this.bucketOf(nowMs);
    while (series.length <= bucket) series.push(new LatencyHistogram());
    return series[bucket];
  }

  /** The connection is gone: its in-flight operations fail; it is reopened while the run goes on. */
  onLost(conn: Connection): void {
    const kind = conn.lostKind === 'timeout' ? 'timeout' : `connection:${conn.lostKind}`;
    const message = `connection ${conn.index} lost (${conn.lostKind})`;
    if (conn.inFlight === 0) this.noteError(kind, message);
    while (conn.inFlight > 0) {
      const slot = conn.shift();
      if (slot < 0) continue;
      this.fail(slot, kind, message);
      this.inFlight--;
      this.releaseSlot(slot);
    }
    if (this.issuing) this.reopenLater(conn);
    this.finishIfIdle();
  }

  private reopenLater(conn: Connection): void {
    const timer = setTimeout(() => {
      if (!this.issuing) return;
      conn.open().then(
        () => this.onReady(conn),
        () => this.reopenLater(conn),
      );
    }, RECONNECT_DELAY_MS);
    this.timers.push(timer);
  }

  private checkTimeouts(): void {
    const now = performance.now();
    for (const conn of this.conns) {
      const slot = conn.oldest;
      if (slot >= 0 && now - this.sentMs[slot] > this.spec.timeoutMs) conn.destroy('timeout');
    }
  }

  // ── The end ───────────────────────────────────────────────────────────────────────────────

  /** Ends a run early, as its duration running out would: no new operation, what is in flight completes. */
  stop(): void {
    if (this.issuing) this.stopIssuing();
  }

  /** The duration is over. The open loop first sends what is due (its last timer may not have fired). */
  private stopIssuing(): void {
    if (this.spec.rate !== undefined) this.schedule();
    this.issuing = false;
    this.finishIfIdle();
  }

  private finishIfIdle(): void {
    if (this.issuing || this.inFlight > 0 || this.finished === undefined) return;
    const finished = this.finished;
    this.finished = undefined;
    for (const t of this.timers) clearTimeout(t);
    if (this.scheduleTimer !== undefined) clearTimeout(this.scheduleTimer);
    for (const c of this.conns) c.close();
    const r = this.result;
    r.elapsedMs = performance.now() - this.t0;
    r.sentOps = this.issued;
    r.intendedOps = this.spec.rate === undefined ? this.issued : this.opsTotal;
    finished();
  }
}

/** The kind of an error reply: its first word (`ERR`, `NOAUTH`, `TRYAGAIN`, …). */
export function errorKind(text: string): string {
  const space = text.indexOf(' ');
  const word = space === -1 ? text : text.slice(0, space);
  return word === '' ? 'ERR' : word;
}
