// A bounded log of a node's cluster events for readers that come and go (`GET /cluster/events`):
// each event gets the next sequence number from 1; the newest `capacity` are kept, and a reader
// resuming after an event that slid out is told how many it lost (datum's sliding overflow), never
// holding the writer back. Pure: the admin server owns the connections and their queues.

import { assert } from './assert.js';

export interface LoggedEvent<T> {
  sequence: number;
  type: string;
  atMs: number;
  data: T;
}

export interface EventsSince<T> {
  events: Array<LoggedEvent<T>>;
  /** Events after `after` that slid out before the reader asked: it cannot see them. */
  lost: number;
}

export class EventLog<T> {
  private readonly ring: Array<LoggedEvent<T> | undefined>;
  /** Sequence of the newest event; 0 before the first. */
  private last = 0;
  private readonly listeners = new Set<(event: LoggedEvent<T>) => void>();

  constructor(readonly capacity: number) {
    assert(Number.isInteger(capacity) && capacity >= 1, 'an event log keeps at least one event');
    this.ring = new Array(capacity).fill(undefined);
  }

  get lastSequence(): number {
    return this.last;
  }

  /** Sequence of the oldest event still kept (last + 1 when empty). */
  get firstSequence(): number {
    return Math.max(1, this.last - this.capacity + 1);
  }

  append(type: string, atMs: number, data: T): LoggedEvent<T> {
    const event = { sequence: ++this.last, type, atMs, data };
    this.ring[event.sequence % this.capacity] = event;
    for (const listener of this.listeners) listener(event);
    return event;
  }

  /** Every kept event after sequence `after` (0: all), oldest first. */
  since(after: number): EventsSince<T> {
    const from = Math.max(after + 1, this.firstSequence);
    const lost = Math.max(0, from - (after + 1));
    const events: Array<LoggedEvent<T>> = [];
    for (let s = from; s <= this.last; s++) events.push(this.ring[s % this.capacity]!);
    return { events, lost };
  }

  /** Calls `listener` with each event appended from now on; returns the unsubscribe. */
  subscribe(listener: (event: LoggedEvent<T>) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
