// The worker's paced TTL sweep. Every `cleanIntervalMs` it offers each stored record to its
// fragment's cleaner (FragmentCore's `sweep` event), a page per event-loop turn at most and
// `cleanKeysPerSec` keys a second: a pass over many keys takes longer instead of costing more. A
// pass still running when the next interval comes is not started again.
//
// A fragment whose last pass found no value with a deadline, and whose actor has staged none since,
// is skipped: data without TTLs costs no reads. Every write reaches the store through the actor,
// which counts the values with a deadline it stages; a pass first waits until what the actor
// staged before it is committed, so the pages it reads hold every value that count covers. A new
// actor (the fragment opened or gained) starts unknown: its first pass reads everything.

import type { Logger } from 'pino';
import type { WallClock } from '../core/clock.js';
import { asStorageError } from '../core/errors.js';
import type { FragmentCore } from '../core/fragment.js';
import { CLEAN_PAGE_KEYS_MAX, CLEAN_POOL_PAGE_KEYS } from '../core/limits.js';
import { TokenBucket } from '../core/op-queue.js';
import { isExpiredValue, isExpiringValue } from '../core/record.js';
import type { KvStore, PageStart } from '../native-bindings/kv-store.js';
import type { PoolSpans } from './pool-spans.js';
import { NEXT_PAGE, type Span } from './reconcile-span.js';

export interface SweepHost {
  /** The fragments the worker serves now. */
  fragments(): readonly number[];
  /** The fragment's actor; undefined once it stopped serving (dropped while a pass ran). */
  core(fragment: number): FragmentCore | undefined;
  /** Resolves once everything the actor staged so far is committed, visible to store pages. */
  committed(core: FragmentCore): Promise<void>;
  /** Offers a page of stored records to the fragment's cleaner and carries out what it decides. */
  sweepPage(core: FragmentCore, nowMs: number, entries: Array<{ key: Buffer; record: Buffer }>): void;
}

/** How a fragment's pass ended: over every key, with or without a value with a deadline, or not. */
type FragmentPass = 'expiring' | 'none-expiring' | 'cut-short';

export class TtlSweeper {
  /** Passes started, and fragments they skipped as holding no value with a deadline. */
  readonly stats = { passes: 0, fragmentsSkipped: 0 };
  /** Fragments whose last pass found no value with a deadline: their actor then, and its count. */
  private readonly quiet = new Map<number, { core: FragmentCore; expiringWritten: number }>();
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;
  private closed = false;
  /** Keys the cleaner may examine (`cleanKeysPerSec`); an idle spell saves up none. */
  private readonly keys: TokenBucket;
  /** Ends the cleaner's wait for its next page early (at close). */
  private paceWake: (() => void) | undefined;

  constructor(
    private readonly config: { cleanIntervalMs: number; cleanKeysPerSec: number },
    private readonly store: KvStore,
    /** The background pool, when the store shares its readers with it (lmdb). */
    private readonly pool: PoolSpans | undefined,
    private readonly host: SweepHost,
    private readonly logger: Logger,
    private readonly clock: WallClock,
  ) {
    this.keys = new TokenBucket(config.cleanKeysPerSec, 1, clock.nowMs());
  }

  start(): void {
    this.timer = setInterval(() => void this.sweepAll(), this.config.cleanIntervalMs);
  }

  /** Stops the sweep: a pass running ends at its next page. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.paceWake?.();
  }

  private async sweepAll(): Promise<void> {
    if (this.sweeping || this.closed) return;
    this.sweeping = true;
    this.stats.passes++;
    // A dropped fragment's actor is not kept for its sake.
    for (const [fragment, quiet] of this.quiet) {
      if (this.host.core(fragment) !== quiet.core) this.quiet.delete(fragment);
    }
    try {
      // A copy: fragments may come and go while the pass awaits its pages.
      for (const fragment of [...this.host.fragments()]) {
        const core = this.host.core(fragment);
        if (core === undefined) continue;
        const quiet = this.quiet.get(fragment);
        if (quiet?.core === core && quiet.expiringWritten === core.expiringWritten) {
          this.stats.fragmentsSkipped++;
          continue;
        }
        const expiringWritten = core.expiringWritten;
        // Until what the count covers is in the store, a pass that finds nothing proves nothing.
        const covered = await this.host.committed(core).then(
          () => true,
          () => false,
        );
        const pass =
          (this.pool === undefined ? undefined : await this.sweepFromPool(this.pool, fragment)) ??
          (await this.sweepHere(fragment));
        if (pass === 'none-expiring' && covered) this.quiet.set(fragment, { core, expiringWritten });
        else this.quiet.delete(fragment);
        if (this.closed) return;
      }
    } catch (err) {
      this.logger.error({ err: asStorageError(err).message }, 'TTL sweep failed; retrying next interval');
    } finally {
      this.sweeping = false;
    }
  }

  /** A fragment's sweep with the reading done in this thread. */
  private async sweepHere(fragment: number): Promise<FragmentPass> {
    let start: PageStart | undefined;
    let expiring = false;
    for (;;) {
      await this.pace();
      if (this.closed) return 'cut-short';
      const entries = await this.store.page(fragment, start, undefined, CLEAN_PAGE_KEYS_MAX);
      this.keys.spend(entries.length, this.clock.nowMs());
      const core = this.host.core(fragment);
      if (core === undefined) return 'cut-short';
      if (entries.length === 0) return expiring ? 'expiring' : 'none-expiring';
      expiring ||= entries.some((e) => isExpiringValue(e.record));
      this.host.sweepPage(core, this.clock.nowMs(), entries);
      start = { key: entries[entries.length - 1].key, inclusive: false };
    }
  }

  /**
   * A fragment's sweep with the reading done in the background pool: the pool examines a page of
   * keys from a read-only view and sends back only those expired at the time asked; this thread
   * checks each against its current record (it may have changed since the pool read it). Undefined
   * when the pool would not take a page: the caller then sweeps in this thread.
   */
  private async sweepFromPool(pool: PoolSpans, fragment: number): Promise<FragmentPass | undefined> {
    let afterKey: Uint8Array | undefined;
    let expiring = false;
    for (;;) {
      await this.pace();
      const core = this.host.core(fragment);
      if (this.closed || core === undefined) return 'cut-short';
      let span: Span;
      try {
        span = await pool.read(fragment, afterKey, NEXT_PAGE, this.clock.nowMs());
      } catch {
        return undefined;
      }
      if (this.closed || this.host.core(fragment) !== core) return 'cut-short';
      expiring ||= span.expiring === true;
      // A short last page is counted in full: the pool does not say how many keys it examined.
      this.keys.spend(CLEAN_POOL_PAGE_KEYS, this.clock.nowMs());
      const nowMs = this.clock.nowMs();
      const entries: Array<{ key: Buffer; record: Buffer }> = [];
      for (const e of span.entries) {
        const current = core.current(e.key);
        if (current !== undefined && isExpiredValue(current, nowMs)) {
          entries.push({ key: e.key, record: Buffer.from(current) });
        }
      }
      if (entries.length > 0) this.host.sweepPage(core, nowMs, entries);
      if (!span.truncated || span.entries.length === 0) return expiring ? 'expiring' : 'none-expiring';
      afterKey = span.entries[span.entries.length - 1].key;
    }
  }

  /** Waits until the cleaner may examine its next page: the next event-loop turn at the soonest. */
  private pace(): Promise<void> {
    const waitMs = this.keys.waitMs(this.clock.nowMs());
    return new Promise<void>((resolve) => {
      if (waitMs === 0) return setImmediate(resolve);
      const timer = setTimeout(() => {
        this.paceWake = undefined;
        resolve();
      }, waitMs);
      this.paceWake = () => {
        clearTimeout(timer);
        this.paceWake = undefined;
        resolve();
      };
    });
  }
}
