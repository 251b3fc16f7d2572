// Redis Pub/Sub's subscription tables: who is subscribed to which channels, patterns and shard
// channels, and who receives a message published on a channel. No I/O: the driver encodes and
// sends. Names are bytes kept as latin1 strings (one character per byte, `latin1()`), so any channel
// name is an exact Map key. Tables hold only names with at least one subscriber, so their sizes are
// Redis's counts of active channels and patterns.

import { latin1 } from './bytes.js';
import { globMatch } from './glob.js';

export const SubscriptionKind = {
  /** SUBSCRIBE / PUBLISH. */
  Channel: 0,
  /** PSUBSCRIBE: a glob over channel names (not shard channels). */
  Pattern: 1,
  /** SSUBSCRIBE / SPUBLISH (Redis 7's shard channels: their own namespace). */
  Shard: 2,
} as const;
export type SubscriptionKind = (typeof SubscriptionKind)[keyof typeof SubscriptionKind];

/** One subscriber's names per kind, in subscription order (an UNSUBSCRIBE without names walks it). */
export class Subscriptions {
  readonly names: readonly [Set<string>, Set<string>, Set<string>] = [new Set(), new Set(), new Set()];

  /** Channels and patterns: what SUBSCRIBE, PSUBSCRIBE and their UNSUBSCRIBEs answer with. */
  get count(): number {
    return this.names[SubscriptionKind.Channel].size + this.names[SubscriptionKind.Pattern].size;
  }

  /** Shard channels: what SSUBSCRIBE and SUNSUBSCRIBE answer with. */
  get shardCount(): number {
    return this.names[SubscriptionKind.Shard].size;
  }

  get total(): number {
    return this.count + this.shardCount;
  }
}

export interface Subscriber {
  readonly subscriptions: Subscriptions;
}

interface PatternEntry<S> {
  readonly bytes: Buffer;
  readonly subscribers: Set<S>;
}

export class PubSubRegistry<S extends Subscriber> {
  private readonly channels = new Map<string, Set<S>>();
  private readonly shardChannels = new Map<string, Set<S>>();
  private readonly patterns = new Map<string, PatternEntry<S>>();

  /** Adds `name` to `s`'s subscriptions of `kind`; false when `s` held it already. */
  subscribe(s: S, kind: SubscriptionKind, name: string): boolean {
    const own = s.subscriptions.names[kind];
    if (own.has(name)) return false;
    own.add(name);
    if (kind === SubscriptionKind.Pattern) {
      let entry = this.patterns.get(name);
      if (entry === undefined) {
        entry = { bytes: Buffer.from(name, 'latin1'), subscribers: new Set() };
        this.patterns.set(name, entry);
      }
      entry.subscribers.add(s);
    } else {
      const table = this.table(kind);
      let subscribers = table.get(name);
      if (subscribers === undefined) {
        subscribers = new Set();
        table.set(name, subscribers);
      }
      subscribers.add(s);
    }
    return true;
  }

  /** Removes `name` from `s`'s subscriptions of `kind`; false when `s` did not hold it. */
  unsubscribe(s: S, kind: SubscriptionKind, name: string): boolean {
    if (!s.subscriptions.names[kind].delete(name)) return false;
    if (kind === SubscriptionKind.Pattern) {
      const entry = this.patterns.get(name)!;
      entry.subscribers.delete(s);
      if (entry.subscribers.size === 0) this.patterns.delete(name);
    } else {
      const table = this.table(kind);
      const subscribers = table.get(name)!;
      subscribers.delete(s);
      if (subscribers.size === 0) table.delete(name);
    }
    return true;
  }

  /** Removes every subscription `s` holds (a closed connection). */
  unsubscribeAll(s: S): void {
    for (const kind of [
      SubscriptionKind.Channel,
      SubscriptionKind.Pattern,
      SubscriptionKind.Shard,
    ] as const) {
      for (const name of [...s.subscriptions.names[kind]]) this.unsubscribe(s, kind, name);
    }
  }

  /**
   * Visits every receiver of a message on `channel` (a shard channel when `shard`): the channel's
   * subscribers with `pattern` undefined, then, for a plain channel, the subscribers of each
   * matching pattern with that pattern. A subscriber is visited once per way it matches, as Redis
   * sends it one message per subscription. Returns the number of visits (PUBLISH's answer).
   */
  forEachReceiver(
    shard: boolean,
    channel: Uint8Array,
    visit: (subscriber: S, pattern: Buffer | undefined) => void,
  ): number {
    const table = shard ? this.shardChannels : this.channels;
    // Nobody listening at all: no name to build.
    if (table.size === 0 && (shard || this.patterns.size === 0)) return 0;
    let receivers = 0;
    const subscribers = table.get(latin1(channel));
    if (subscribers !== undefined) {
      for (const s of subscribers) visit(s, undefined);
      receivers += subscribers.size;
    }
    if (shard) return receivers;
    for (const entry of this.patterns.values()) {
      if (!globMatch(entry.bytes, channel)) continue;
      for (const s of entry.subscribers) visit(s, entry.bytes);
      receivers += entry.subscribers.size;
    }
    return receivers;
  }

  /** Subscribers of one channel or shard channel, patterns not counted (PUBSUB NUMSUB / SHARDNUMSUB). */
  subscriberCount(
    kind: typeof SubscriptionKind.Channel | typeof SubscriptionKind.Shard,
    name: string,
  ): number {
    return this.table(kind).get(name)?.size ?? 0;
  }

  /** Channels (or shard channels) with a subscriber, those matching `pattern` when given. */
  activeChannels(
    kind: typeof SubscriptionKind.Channel | typeof SubscriptionKind.Shard,
    pattern: Uint8Array | undefined,
  ): string[] {
    const names: string[] = [];
    for (const name of this.table(kind).keys()) {
      if (pattern === undefined || globMatch(pattern, Buffer.from(name, 'latin1'))) names.push(name);
    }
    return names;
  }

  /** Channels with a subscriber (INFO's pubsub_channels). */
  get channelCount(): number {
    return this.channels.size;
  }

  /** Distinct patterns with a subscriber (PUBSUB NUMPAT, INFO's pubsub_patterns). */
  get patternCount(): number {
    return this.patterns.size;
  }

  /** Shard channels with a subscriber (INFO's pubsubshard_channels). */
  get shardChannelCount(): number {
    return this.shardChannels.size;
  }

  private table(kind: SubscriptionKind): Map<string, Set<S>> {
    return kind === SubscriptionKind.Shard ? this.shardChannels : this.channels;
  }
}
