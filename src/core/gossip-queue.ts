// The gossip queue of membership updates (memberlist's TransmitLimitedQueue): each update rides on
// outgoing messages until it has been sent its retransmit limit, the least-sent first (the newest
// among equals), and an update drops the queued ones it makes obsolete (a refutation voids the
// claims at lower incarnations). Bounded: past MEMBERSHIP_BROADCAST_QUEUE_MAX the most-sent go.

import { MEMBERSHIP_BROADCAST_QUEUE_MAX } from './limits.js';
import type { MemberUpdate } from './membership-types.js';

interface Broadcast {
  update: MemberUpdate;
  transmits: number;
  /** Insertion order: among equally sent updates, the newest goes first (memberlist). */
  order: number;
}

export class GossipQueue {
  private readonly items: Broadcast[] = [];
  private order = 0;

  get length(): number {
    return this.items.length;
  }

  push(u: MemberUpdate): void {
    for (let i = this.items.length - 1; i >= 0; i--) {
      if (obsoletes(u, this.items[i]!.update)) this.items.splice(i, 1);
    }
    this.items.push({ update: u, transmits: 0, order: ++this.order });
    if (this.items.length > MEMBERSHIP_BROADCAST_QUEUE_MAX) {
      this.items.sort(byFewestTransmits);
      this.items.length = MEMBERSHIP_BROADCAST_QUEUE_MAX;
    }
  }

  /** Up to `count` updates, fewest-sent first; those now sent `retransmitLimit` times leave the queue. */
  take(count: number, retransmitLimit: number): MemberUpdate[] {
    this.items.sort(byFewestTransmits);
    const taken = Math.min(count, this.items.length);
    const updates: MemberUpdate[] = [];
    for (let i = 0; i < taken; i++) {
      const b = this.items[i]!;
      updates.push(b.update);
      b.transmits++;
    }
    for (let i = taken - 1; i >= 0; i--)
      if (this.items[i]!.transmits >= retransmitLimit) this.items.splice(i, 1);
    return updates;
  }
}

function byFewestTransmits(a: Broadcast, b: Broadcast): number {
  return a.transmits - b.transmits || b.order - a.order;
}

/** Whether queued update `old` says nothing once `u` is known. */
function obsoletes(u: MemberUpdate, old: MemberUpdate): boolean {
  if (u.nodeId !== old.nodeId) return false;
  switch (u.kind) {
    case 'alive':
      return old.kind === 'alive' || old.incarnation < u.incarnation;
    case 'suspect':
      return old.kind === 'suspect' && old.reporter === u.reporter;
    case 'unreachable':
      return (old.kind === 'suspect' || old.kind === 'unreachable') && old.reporter === u.reporter;
    case 'down':
      return old.kind !== 'removed';
    case 'removed':
      return true;
  }
}
