// Per-command figures for INFO commandstats and latencystats, counted as Redis counts them: `calls`
// that ran, the main thread's time running them (the synchronous part: a reply that waits for a
// worker or a peer does not count its wait, as Redis does not count a blocked command's), calls
// `rejected` before they ran (arity, NOAUTH, OOM, a command not allowed while subscribed), and calls
// that ran and answered with an error (`failed`). A container command is counted per subcommand
// (`client|list`), as Redis 7 lists it. Counting is per command id in typed arrays: nothing is
// allocated per command but a container command's name. A worker port counts its own; INFO adds
// their snapshots (by name) to the main port's.

import { COMMAND_STATS_SUBCOMMANDS_MAX } from '../../core/limits.js';
import type { RespCommand } from '../../core/resp-parser.js';

/** LatencyHistogram's layout: exact below 128 ns, then 64 buckets per power of two (1.6 % apart). */
const LINEAR_NS = 128;
const SUB_BUCKET_BITS = 6;
const SUB_BUCKETS = 1 << SUB_BUCKET_BITS;
/** Powers of two above LINEAR_NS the histogram covers: up to 2^31 ns (2.1 s); longer counts there. */
const EXPONENTS = 31 - 7;
const LATENCY_BUCKETS = LINEAR_NS + EXPONENTS * SUB_BUCKETS;
/** Redis 7's `latency-tracking-info-percentiles` default. */
const LATENCY_PERCENTILES = [50, 99, 99.9] as const;

/** One command's figures, as a worker port publishes them to the main thread (structured-cloned). */
export interface CommandStatsRow {
  /** Lower case; `container|sub` for a subcommand. */
  name: string;
  calls: number;
  usec: number;
  rejected: number;
  failed: number;
  /** The latency histogram's non-empty buckets as [bucket, count, bucket, count, …]. */
  latency: number[];
}

export class CommandStats {
  /** Bumped by every call counted: a publisher sends a snapshot only when it moved. */
  changes = 0;
  private readonly tableNames: readonly string[];
  private readonly containers: ReadonlySet<number>;
  /** Stat index of each of the table's commands, by lower-case name. */
  private readonly byName = new Map<string, number>();
  private readonly names: string[];
  private readonly calls: Float64Array;
  private readonly usec: Float64Array;
  private readonly rejected: Float64Array;
  private readonly failed: Float64Array;
  private readonly latency: (LatencyHistogram | undefined)[] = [];
  /** Stat index of each container command's subcommand seen so far (`client|list`). */
  private readonly subcommands = new Map<string, number>();
  /** 1 for the ids of container commands: a per-command check cheaper than a Set's. */
  private readonly container: Uint8Array;

  /**
   * `names`: the command table's upper-case names, by command id; `containers`: the ids of the
   * commands counted per subcommand.
   */
  constructor(names: readonly string[], containers: ReadonlySet<number>) {
    this.tableNames = names;
    this.containers = containers;
    this.names = names.map((n) => n.toLowerCase());
    for (const [id, name] of this.names.entries()) this.byName.set(name, id);
    this.container = new Uint8Array(names.length);
    for (const id of containers) this.container[id] = 1;
    const capacity = names.length + COMMAND_STATS_SUBCOMMANDS_MAX;
    this.calls = new Float64Array(capacity);
    this.usec = new Float64Array(capacity);
    this.rejected = new Float64Array(capacity);
    this.failed = new Float64Array(capacity);
  }

  /**
   * The stat index of command `id` as `cmd` invokes it: its own, or for a container command its
   * subcommand's (the container's own once COMMAND_STATS_SUBCOMMANDS_MAX subcommands are known).
   */
  statOf(id: number, cmd: RespCommand): number {
    if (this.container[id] === 0 || cmd.argc < 2) return id;
    const name = `${this.names[id]}|${cmd.arg(1).toString('latin1').toLowerCase()}`;
    let stat = this.subcommands.get(name);
    if (stat === undefined) {
      if (this.subcommands.size >= COMMAND_STATS_SUBCOMMANDS_MAX) return id;
      stat = this.names.length;
      this.names.push(name);
      this.subcommands.set(name, stat);
    }
    return stat;
  }

  /** A call of `stat` ran for `ms` of the main thread's time. */
  ran(stat: number, ms: number): void {
    this.changes++;
    this.calls[stat]++;
    this.usec[stat] += ms * 1000;
    let histogram = this.latency[stat];
    if (histogram === undefined) {
      histogram = new LatencyHistogram();
      this.latency[stat] = histogram;
    }
    histogram.record(Math.round(ms * 1e6));
  }

  reject(stat: number): void {
    this.changes++;
    this.rejected[stat]++;
  }

  fail(stat: number): void {
    this.changes++;
    this.failed[stat]++;
  }

  /** Every command called or refused, with its figures. */
  snapshot(): CommandStatsRow[] {
    const rows: CommandStatsRow[] = [];
    for (let s = 0; s < this.names.length; s++) {
      if (this.calls[s] === 0 && this.rejected[s] === 0 && this.failed[s] === 0) continue;
      rows.push({
        name: this.names[s],
        calls: this.calls[s],
        usec: this.usec[s],
        rejected: this.rejected[s],
        failed: this.failed[s],
        latency: this.latency[s]?.buckets() ?? [],
      });
    }
    return rows;
  }

  /** Adds another counter's rows (a worker port's) to these; a name not in the table is skipped. */
  add(rows: readonly CommandStatsRow[]): void {
    for (const row of rows) {
      const stat = this.statByName(row.name);
      if (stat === undefined) continue;
      this.calls[stat] += row.calls;
      this.usec[stat] += row.usec;
      this.rejected[stat] += row.rejected;
      this.failed[stat] += row.failed;
      if (row.latency.length === 0) continue;
      let histogram = this.latency[stat];
      if (histogram === undefined) {
        histogram = new LatencyHistogram();
        this.latency[stat] = histogram;
      }
      histogram.addBuckets(row.latency);
    }
  }

  /** A new counter holding these figures and `others`' added (INFO over every port). */
  plus(others: readonly (readonly CommandStatsRow[])[]): CommandStats {
    const total = new CommandStats(this.tableNames, this.containers);
    total.add(this.snapshot());
    for (const rows of others) total.add(rows);
    return total;
  }

  /** The stat index of a row's name: a command's, a known or new subcommand's, else its container's. */
  private statByName(name: string): number | undefined {
    const own = this.byName.get(name) ?? this.subcommands.get(name);
    if (own !== undefined) return own;
    const bar = name.indexOf('|');
    if (bar === -1) return undefined;
    const container = this.byName.get(name.slice(0, bar));
    if (container === undefined || this.container[container] === 0) return undefined;
    if (this.subcommands.size >= COMMAND_STATS_SUBCOMMANDS_MAX) return container;
    const stat = this.names.length;
    this.names.push(name);
    this.subcommands.set(name, stat);
    return stat;
  }

  /** INFO commandstats rows, one per command called or refused since the start. */
  commandRows(): Array<[string, string]> {
    const rows: Array<[string, string]> = [];
    for (let s = 0; s < this.names.length; s++) {
      const calls = this.calls[s];
      if (calls === 0 && this.rejected[s] === 0 && this.failed[s] === 0) continue;
      const usec = Math.round(this.usec[s]);
      const perCall = calls === 0 ? 0 : this.usec[s] / calls;
      rows.push([
        `cmdstat_${this.names[s]}`,
        `calls=${calls},usec=${usec},usec_per_call=${perCall.toFixed(2)},rejected_calls=${this.rejected[s]},failed_calls=${this.failed[s]}`,
      ]);
    }
    return rows;
  }

  /** INFO latencystats rows: per command that ran, its p50, p99 and p99.9 in µs. */
  latencyRows(): Array<[string, string]> {
    const rows: Array<[string, string]> = [];
    for (let s = 0; s < this.names.length; s++) {
      const histogram = this.latency[s];
      if (histogram === undefined) continue;
      const figures = LATENCY_PERCENTILES.map((p) => `p${p}=${(histogram.valueAt(p) / 1000).toFixed(3)}`);
      rows.push([`latency_percentiles_usec_${this.names[s]}`, figures.join(',')]);
    }
    return rows;
  }
}

/**
 * Latencies in ns, as HdrHistogram keeps them with two significant figures: exact below 128 ns,
 * then 64 buckets per power of two. A percentile is the highest value of its bucket.
 */
export class LatencyHistogram {
  private readonly counts = new Uint32Array(LATENCY_BUCKETS);
  private total = 0;

  record(ns: number): void {
    this.counts[bucketOf(ns)]++;
    this.total++;
  }

  /** The non-empty buckets as [bucket, count, …]. */
  buckets(): number[] {
    const pairs: number[] = [];
    for (let b = 0; b < LATENCY_BUCKETS; b++) if (this.counts[b] !== 0) pairs.push(b, this.counts[b]);
    return pairs;
  }

  /** Adds another histogram's `buckets()`; pairs out of range are skipped. */
  addBuckets(pairs: readonly number[]): void {
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const b = pairs[i];
      if (!Number.isInteger(b) || b < 0 || b >= LATENCY_BUCKETS) continue;
      this.counts[b] += pairs[i + 1];
      this.total += pairs[i + 1];
    }
  }

  /** The value at or below which `percentile` % of the values recorded fall (0 when none were). */
  valueAt(percentile: number): number {
    if (this.total === 0) return 0;
    const wanted = Math.max(1, Math.ceil((percentile / 100) * this.total));
    let seen = 0;
    for (let b = 0; b < LATENCY_BUCKETS; b++) {
      seen += this.counts[b];
      if (seen >= wanted) return highestOf(b);
    }
    return highestOf(LATENCY_BUCKETS - 1);
  }
}

function bucketOf(ns: number): number {
  if (ns < LINEAR_NS) return Math.max(ns, 0);
  const exponent = 31 - Math.clz32(Math.min(ns, 2 ** 31 - 1));
  const shift = exponent - SUB_BUCKET_BITS;
  return LINEAR_NS + (exponent - 7) * SUB_BUCKETS + ((ns >>> shift) & (SUB_BUCKETS - 1));
}

/** The highest value bucket `b` holds. */
function highestOf(b: number): number {
  if (b < LINEAR_NS) return b;
  const exponent = 7 + Math.floor((b - LINEAR_NS) / SUB_BUCKETS);
  const shift = exponent - SUB_BUCKET_BITS;
  const low = (SUB_BUCKETS + ((b - LINEAR_NS) % SUB_BUCKETS)) * 2 ** shift;
  return low + 2 ** shift - 1;
}
