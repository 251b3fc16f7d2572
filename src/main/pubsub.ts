// The node's Pub/Sub: the subscription tables (src/core/pubsub.ts) and the delivery of published
// messages to local subscribers — RESP connections and embedded listeners. A message published here
// also goes to every peer of a cluster, which delivers it to its own subscribers, as Redis Cluster
// does for PUBLISH; SPUBLISH's shard channels travel the same way (every node answers every slot).
// Delivery is at most once, with no storage: a subscriber that is not connected misses the message.

import { PubSubRegistry, type Subscriber, Subscriptions } from '../core/pubsub.js';
import { RespWriter } from '../core/resp-writer.js';

/** Encodes every delivery (synchronously: one is enough). */
const encoder = new RespWriter(2);

/**
 * One message being delivered; its RESP encodings are made once, on first need, per pattern. Valid
 * during the delivery only: the channel and message may be views of a client's read buffer.
 */
export class Delivery {
  /** The pattern the receiver matched (pmessage), undefined for a channel subscriber. */
  pattern: Buffer | undefined = undefined;
  private resp2: Buffer | undefined;
  private resp3: Buffer | undefined;

  constructor(
    readonly shard: boolean,
    readonly channel: Buffer,
    readonly message: Buffer,
  ) {}

  setPattern(pattern: Buffer | undefined): void {
    this.pattern = pattern;
    this.resp2 = undefined;
    this.resp3 = undefined;
  }

  /** The message as Redis pushes it: `message`, `pmessage` or `smessage`, in RESP2 or RESP3. */
  resp(protocol: 2 | 3): Buffer {
    if (this.resp2 === undefined) {
      const w = encoder;
      if (this.pattern !== undefined) {
        w.arrayHeader(4);
        w.bulk('pmessage');
        w.bulk(this.pattern);
      } else {
        w.arrayHeader(3);
        w.bulk(this.shard ? 'smessage' : 'message');
      }
      w.bulk(this.channel);
      w.bulk(this.message);
      this.resp2 = w.take();
    }
    if (protocol === 2) return this.resp2;
    if (this.resp3 === undefined) {
      // The same bytes with a push header (`>` for `*`).
      this.resp3 = Buffer.from(this.resp2);
      this.resp3[0] = 0x3e;
    }
    return this.resp3;
  }
}

/** A local subscriber: a RESP connection or an embedded listener. */
export interface PubSubClient extends Subscriber {
  /** Receives one message; `delivery` and its buffers are valid during the call only. */
  receive(delivery: Delivery): void;
}

export class PubSubHub {
  readonly registry = new PubSubRegistry<PubSubClient>();
  /** Passes a message published here on to the cluster's peers; unset on a single node. */
  forward: ((shard: boolean, channel: Buffer, message: Buffer) => void) | undefined = undefined;

  /** PUBLISH / SPUBLISH: delivers here and to the peers; the number of local receivers. */
  publish(shard: boolean, channel: Buffer, message: Buffer): number {
    const receivers = this.deliver(shard, channel, message);
    this.forward?.(shard, channel, message);
    return receivers;
  }

  /** Delivers to this node's subscribers only (a message published here, or at a peer). */
  deliver(shard: boolean, channel: Buffer, message: Buffer): number {
    let delivery: Delivery | undefined;
    return this.registry.forEachReceiver(shard, channel, (client, pattern) => {
      delivery ??= new Delivery(shard, channel, message);
      if (pattern !== delivery.pattern) delivery.setPattern(pattern);
      client.receive(delivery);
    });
  }
}

/** A message as an embedded listener receives it: its own copies of the bytes. */
export interface PubSubMessage {
  channel: Buffer;
  message: Buffer;
  /** The pattern the subscription matched, for a pattern subscription. */
  pattern: Buffer | undefined;
  /** Published on a shard channel (SPUBLISH). */
  shard: boolean;
}

/**
 * An embedded subscriber (`Tessera.subscribe`). Its listener runs in a microtask of its own, so
 * whatever it does — publish again, unsubscribe — happens after the delivery that called it.
 */
export class ListenerClient implements PubSubClient {
  readonly subscriptions = new Subscriptions();

  constructor(private readonly listener: (message: PubSubMessage) => void) {}

  receive(delivery: Delivery): void {
    const message: PubSubMessage = {
      channel: Buffer.from(delivery.channel),
      message: Buffer.from(delivery.message),
      pattern: delivery.pattern === undefined ? undefined : Buffer.from(delivery.pattern),
      shard: delivery.shard,
    };
    queueMicrotask(() => this.listener(message));
  }
}
