// LATENCY, as Redis's latency monitor keeps it: with `--latency-monitor-threshold` ms set (0, the
// default, keeps nothing, as in Redis), each command whose main-thread time reached it is a sample
// of the event `command`, or `fast-command` for a command Redis flags fast. Per event, one sample
// per second (the highest of that second), the last LATENCY_HISTORY_SAMPLES of them, and the
// highest ever seen.

import { LATENCY_HISTORY_SAMPLES } from '../../core/limits.js';
import type { RespWriter } from '../../core/resp-writer.js';

interface LatencySeries {
  /** Unix seconds and ms of each sample, oldest first. */
  samples: Array<{ timeS: number; latencyMs: number }>;
  maxMs: number;
}

/** LATENCY DOCTOR with the monitor off: Redis's words, with Tessera's way to turn it on. */
const MONITOR_OFF =
  "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this node. Start it with --latency-monitor-threshold <milliseconds> in order to enable it.\n";
/** Redis's LATENCY DOCTOR answer when nothing was recorded. */
const NOTHING_RECORDED =
  'Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep tonight.\n';

export class LatencyMonitor {
  private readonly events = new Map<string, LatencySeries>();

  constructor(
    /** Milliseconds a command must take to be a sample; 0 records nothing. */
    readonly thresholdMs: number,
  ) {}

  /** Records `latencyMs` of `event` at `timeS` if it reached the threshold. */
  record(event: string, latencyMs: number, timeS: number): void {
    if (this.thresholdMs === 0 || latencyMs < this.thresholdMs) return;
    let series = this.events.get(event);
    if (series === undefined) {
      series = { samples: [], maxMs: 0 };
      this.events.set(event, series);
    }
    const last = series.samples.at(-1);
    if (last !== undefined && last.timeS === timeS) last.latencyMs = Math.max(last.latencyMs, latencyMs);
    else {
      series.samples.push({ timeS, latencyMs });
      if (series.samples.length > LATENCY_HISTORY_SAMPLES) series.samples.shift();
    }
    series.maxMs = Math.max(series.maxMs, latencyMs);
  }

  /** LATENCY LATEST: per event its latest sample's time and latency, and the highest ever. */
  writeLatest(w: RespWriter): void {
    w.arrayHeader(this.events.size);
    for (const [event, series] of this.events) {
      const last = series.samples.at(-1)!;
      w.arrayHeader(4);
      w.bulk(event);
      w.integer(last.timeS);
      w.integer(last.latencyMs);
      w.integer(series.maxMs);
    }
  }

  /** LATENCY HISTORY event: its samples, oldest first (none for an event never recorded). */
  writeHistory(w: RespWriter, event: string): void {
    const samples = this.events.get(event)?.samples ?? [];
    w.arrayHeader(samples.length);
    for (const s of samples) {
      w.arrayHeader(2);
      w.integer(s.timeS);
      w.integer(s.latencyMs);
    }
  }

  /** LATENCY RESET [event…]: forgets the events named (all when none); returns how many it had. */
  reset(events: string[]): number {
    if (events.length === 0) {
      const n = this.events.size;
      this.events.clear();
      return n;
    }
    let n = 0;
    for (const e of events) if (this.events.delete(e)) n++;
    return n;
  }

  /** LATENCY DOCTOR: Redis's words when nothing was recorded, else each event's figures. */
  doctor(): string {
    if (this.thresholdMs === 0) return MONITOR_OFF;
    if (this.events.size === 0) return NOTHING_RECORDED;
    let text = `Latency samples of ${this.thresholdMs} ms or more (--latency-monitor-threshold):\n\n`;
    let i = 1;
    for (const [event, series] of this.events) {
      const mean = series.samples.reduce((n, s) => n + s.latencyMs, 0) / series.samples.length;
      text +=
        `${i++}. ${event}: ${series.samples.length} latency spikes (average ${Math.round(mean)}ms, ` +
        `worst all time ${series.maxMs}ms).\n`;
    }
    return text;
  }
}
