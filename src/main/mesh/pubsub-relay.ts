// Pub/Sub across the cluster: what clients publish here goes to every connected peer that takes it
// (CAPABILITY_PUBSUB), in one PublishBatch frame per event-loop turn, and what a peer published is
// handed to this node's subscribers — never passed on, since every node is connected to every other.
// Delivery is at most once, as Redis Cluster's: a peer that is down, or too far behind to take more
// (PUBSUB_PEER_QUEUED_BYTES_MAX), misses the messages.

import type { Logger } from 'pino';
import { asBuffer } from '../../core/bytes.js';
import { CAPABILITY_PUBSUB } from '../../core/handshake.js';
import { PUBSUB_PAYLOAD_BYTES_MAX, PUBSUB_PEER_QUEUED_BYTES_MAX } from '../../core/limits.js';
import { decodeEnvelope, encodeEnvelope, type PublishedMessage } from '../../threads/peer-messages.js';
import type { Mesh } from './mesh.js';

/** Framing bytes one message adds to a batch, at most (tags, lengths, the shard flag). */
const PUBLISHED_MESSAGE_FRAMING_BYTES = 16;

export class PubSubRelay {
  /** Delivers a message a peer published to this node's subscribers. */
  onPublished: ((shard: boolean, channel: Buffer, message: Buffer) => void) | undefined = undefined;
  /** Messages not sent to a peer that was too far behind, counted once per peer. */
  dropped = 0;
  /** Peers whose messages are being dropped now (logged when it starts and ends). */
  private readonly behind: boolean[];
  private batch: PublishedMessage[] = [];
  private batchBytes = 0;
  private flushScheduled = false;
  private readonly flushTask = (): void => this.flush();

  constructor(
    private readonly mesh: Mesh,
    private readonly members: readonly string[],
    private readonly logger: Logger,
  ) {
    this.behind = members.map(() => false);
  }

  /** Queues a message published here for the peers; the buffers are copied (they may be views). */
  publish(shard: boolean, channel: Uint8Array, message: Uint8Array): void {
    if (!this.anyPeerTakes()) return;
    const bytes = channel.length + message.length + PUBLISHED_MESSAGE_FRAMING_BYTES;
    if (this.batchBytes + bytes > PUBSUB_PAYLOAD_BYTES_MAX + PUBLISHED_MESSAGE_FRAMING_BYTES) this.flush();
    this.batch.push({ channel: Buffer.from(channel), message: Buffer.from(message), shard });
    this.batchBytes += bytes;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(this.flushTask);
    }
  }

  /** A peer's PublishBatch: its messages, for local subscribers. False when it is malformed. */
  receive(bytes: Buffer): boolean {
    let messages: readonly PublishedMessage[];
    try {
      messages = decodeEnvelope(bytes).publishBatch?.messages ?? [];
    } catch {
      return false;
    }
    for (const m of messages) {
      if (m.channel.length + m.message.length > PUBSUB_PAYLOAD_BYTES_MAX) return false;
    }
    for (const m of messages) this.onPublished?.(m.shard, asBuffer(m.channel), asBuffer(m.message));
    return true;
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.batch.length === 0) return;
    const envelope = encodeEnvelope({ publishBatch: { messages: this.batch } });
    const count = this.batch.length;
    this.batch = [];
    this.batchBytes = 0;
    for (let m = 0; m < this.members.length; m++) {
      if (!this.takes(m)) continue;
      const behind = this.mesh.queuedBytesTo(m) > PUBSUB_PEER_QUEUED_BYTES_MAX;
      if (behind !== this.behind[m]) {
        this.behind[m] = behind;
        this.logger.warn(
          { peer: this.members[m] },
          behind
            ? 'peer is behind: dropping Pub/Sub messages for it'
            : 'peer caught up: Pub/Sub messages resume',
        );
      }
      if (behind) this.dropped += count;
      else this.mesh.send(m, envelope);
    }
  }

  private takes(member: number): boolean {
    return member !== this.mesh.selfIndex && (this.mesh.capabilitiesOf(member) & CAPABILITY_PUBSUB) !== 0;
  }

  private anyPeerTakes(): boolean {
    for (let m = 0; m < this.members.length; m++) if (this.takes(m)) return true;
    return false;
  }
}
