// The peer port under attack: a test process plays a peer (member "d", listed but never started)
// with wrong secrets, replayed proofs, borrowed identities, oversized and garbage frames, and a
// clock ten minutes ahead. Each is cut off, and the node keeps serving its real peer.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { authTag, freshHello, type Hello } from '../../src/core/handshake.js';
import { Keyspace } from '../../src/core/keyspace.js';
import { PUBSUB_PAYLOAD_BYTES_MAX } from '../../src/core/limits.js';
import { FrameReader, frameOf } from '../../src/core/peer-frame.js';
import { encodeRecord } from '../../src/core/record.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../../src/threads/peer-messages.js';
import {
  CLUSTER_SECRET,
  type ClusterFixture,
  infoOf,
  localValues,
  logged,
  type NodeProcess,
  startCluster,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';

/** One connection to a node's peer port, speaking frames. */
class FakePeer {
  private readonly reader = new FrameReader();
  private readonly frames: Envelope[] = [];
  private waiters: Array<() => void> = [];
  closed = false;
  readonly whenClosed: Promise<void>;

  private constructor(readonly socket: Socket) {
    this.reader.limit = 16 * 1024 * 1024;
    socket.on('data', (chunk: Buffer) => {
      this.reader.push(chunk);
      for (let f = this.reader.next(); f instanceof Buffer; f = this.reader.next())
        this.frames.push(decodeEnvelope(f));
      this.wake();
    });
    this.whenClosed = new Promise((resolve) =>
      socket.on('close', () => {
        this.closed = true;
        this.wake();
        resolve();
      }),
    );
    socket.on('error', () => {});
  }

  static async connect(port: number): Promise<FakePeer> {
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    return new FakePeer(socket);
  }

  send(envelope: Envelope): void {
    this.socket.write(frameOf(encodeEnvelope(envelope)));
  }

  /** The next frame from the node, or undefined if it closed the connection first. */
  async next(): Promise<Envelope | undefined> {
    while (this.frames.length === 0 && !this.closed) await new Promise<void>((r) => this.waiters.push(r));
    return this.frames.shift();
  }

  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}

const nonZeroChallenge = () => {
  const c = randomBytes(32);
  c[0] |= 1;
  return c;
};

/** How long a handshake's outcome may take to show: well past the node's own 5 s handshake deadline. */
const HANDSHAKE_OUTCOME_MS_MAX = 15_000;

/** Whether `node` logged, at or after `from`, that the connection from our `localPort` became its peer. */
const loggedConnected = (node: NodeProcess, from: number, localPort: number) =>
  logged(node, from, 'peer connected', (l) => String(l.remote).endsWith(`:${localPort}`));

/**
 * Dials `node`'s peer port as `id`, proves with `secret` (or sends `tag` as the proof), and reports
 * whether the node took the connection as its peer: it logs so, or it closes the connection.
 * `logFrom`: where the node's log stood before the dial, for the reasons it logs about this one.
 */
async function handshake(
  node: NodeProcess,
  options: { id: string; secret: string; hello?: Hello; tag?: Uint8Array },
): Promise<{ peer: FakePeer; accepted: boolean; ourHello: Hello; tag: Uint8Array; logFrom: number }> {
  const logFrom = node.log.length;
  const peer = await FakePeer.connect(node.peerPort);
  const ourHello = options.hello ?? freshHello(options.id, nonZeroChallenge());
  peer.send({ hello: { ...ourHello, clientPort: 0 } });
  const theirs = await peer.next();
  const theirAuth = await peer.next();
  if (theirs?.hello === undefined || theirAuth?.helloAuth === undefined) {
    return { peer, accepted: false, ourHello, tag: new Uint8Array(), logFrom };
  }
  const nodeHello: Hello = { ...theirs.hello };
  const tag = options.tag ?? authTag(Buffer.from(options.secret), true, ourHello, nodeHello);
  peer.send({ helloAuth: { authTag: tag } });
  // The protocol answers a good proof with nothing: the node's log says when it took the peer.
  const localPort = peer.socket.localPort!;
  await eventually(() => peer.closed || loggedConnected(node, logFrom, localPort), HANDSHAKE_OUTCOME_MS_MAX);
  return { peer, accepted: loggedConnected(node, logFrom, localPort), ourHello, tag, logFrom };
}

/** Closes an accepted fake peer and waits until the node lets it go: a later dial as "d" is no duplicate. */
async function hangUp(node: NodeProcess, peer: FakePeer): Promise<void> {
  const from = node.log.length;
  peer.destroy();
  await eventually(
    () => logged(node, from, 'peer disconnected', (l) => l.peer === 'd'),
    HANDSHAKE_OUTCOME_MS_MAX,
  );
}

describe('the peer port refuses', () => {
  let cluster: ClusterFixture;
  let node: NodeProcess;
  let port: number;
  before(async () => {
    cluster = await startCluster('cluster-auth', ['a', 'b'], [], ['d']);
    node = cluster.nodes[0];
    port = node.peerPort;
  });
  after(async () => {
    await cluster?.stop();
  });

  test('the right secret is accepted (the fake peer itself is sound)', async () => {
    const { peer, accepted } = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    assert.equal(accepted, true);
    await hangUp(node, peer);
  });

  test('a wrong secret', async () => {
    const { accepted, logFrom } = await handshake(node, {
      id: 'd',
      secret: 'another-secret-of-at-least-32-bytes!!',
    });
    assert.equal(accepted, false);
    await eventually(() => node.log.includes('challenge-bound handshake proof failed', logFrom));
  });

  test('a replayed HelloAuth from an earlier session', async () => {
    const first = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    assert.equal(first.accepted, true);
    await hangUp(node, first.peer);
    // The same Hello and proof again: the node's fresh challenge makes the old proof worthless.
    const replay = await handshake(node, { id: 'd', secret: '', hello: first.ourHello, tag: first.tag });
    assert.equal(replay.accepted, false);
    await eventually(() => node.log.includes('challenge-bound handshake proof failed', replay.logFrom));
  });

  test("a peer claiming the node's own id, or an id that is not a member yet", async () => {
    const own = await handshake(node, { id: 'a', secret: CLUSTER_SECRET });
    assert.equal(own.accepted, false);
    await eventually(() => node.log.includes('peer claimed the local node_id', own.logFrom));
    // An id the node does not know, proving the secret, is admitted as a peer (a node joining),
    // but counts as a member only once membership admits it: it changes no majority nor listing.
    const stranger = await handshake(node, { id: 'zz', secret: CLUSTER_SECRET });
    assert.equal(stranger.accepted, true);
    await eventually(() => node.log.includes('"member":"zz"', stranger.logFrom));
    const info = (await (await node.client()).cluster('INFO')) as string;
    assert.match(info, /cluster_known_nodes:3\r\n/);
    stranger.peer.destroy();
  });

  test('a frame over 4 KiB before the handshake, and garbage bytes', async () => {
    const big = await FakePeer.connect(port);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(4097);
    big.socket.write(Buffer.concat([header, Buffer.alloc(4097, 1)]));
    await big.whenClosed;
    await eventually(() => cluster.nodes[0].log.includes('exceeds the 4096-byte limit'));

    const garbage = await FakePeer.connect(port);
    garbage.socket.write(Buffer.from([0, 0, 0, 6, 0xff, 0xfe, 0xfd, 0x01, 0x02, 0x03]));
    await garbage.whenClosed;
    const early = await FakePeer.connect(port);
    early.send({ sessionStart: { fragment: 1, sessionId: 1 } });
    await early.whenClosed;
    await eventually(() =>
      cluster.nodes[0].log.includes('rejecting application frame before handshake completion'),
    );
  });

  test('a peer that never completes the handshake (5 s), and a Hello after it', async () => {
    const silent = await FakePeer.connect(port);
    const startedAt = Date.now();
    await silent.whenClosed;
    assert.ok(Date.now() - startedAt >= 4_500, 'held until the handshake deadline');
    await eventually(() => cluster.nodes[0].log.includes('handshake not completed within 5000 ms'));
    const { peer, accepted, ourHello } = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    assert.equal(accepted, true);
    peer.send({ hello: { ...ourHello, clientPort: 0 } });
    await peer.whenClosed;
    await eventually(() => cluster.nodes[0].log.includes('duplicate or post-handshake Hello'));
  });

  test('a peer whose clock is ten minutes ahead: its batch is refused and never applied', async () => {
    const { peer, accepted } = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    assert.equal(accepted, true);
    const key = 'future-key';
    const fragment = new Keyspace(16).fragmentOf(Buffer.from(key));
    const aheadMs = Date.now() + 10 * 60_000;
    const record = encodeRecord(false, aheadMs, 0, 0, Buffer.from('d'), Buffer.from('from the future'));
    peer.send({ sessionStart: { fragment, sessionId: 7 } });
    peer.send({
      replicateBatch: {
        fragment,
        sessionId: 7,
        batchSeq: 1,
        requiredAckLevel: 1,
        maxWallMs: aheadMs,
        ops: [{ key: Buffer.from(key), record }],
      },
    });
    await peer.whenClosed;
    await eventually(() => cluster.nodes[0].log.includes("too far ahead of this node's clock"));
    const redis = await cluster.nodes[0].client(true);
    assert.equal(await redis.get(key), null);
  });

  test('a Pub/Sub batch from a peer reaches local subscribers; a malformed or oversized one closes the connection', async () => {
    const sub = await cluster.nodes[0].client();
    const received: string[] = [];
    sub.on('message', (channel: string, message: string) => received.push(`${channel}=${message}`));
    await sub.subscribe('from-d');
    const { peer, accepted } = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    assert.equal(accepted, true);
    peer.send({
      publishBatch: {
        messages: [
          { channel: Buffer.from('from-d'), message: Buffer.from('one'), shard: false },
          { channel: Buffer.from('from-d'), message: Buffer.from('apart'), shard: true },
          { channel: Buffer.from('from-d'), message: Buffer.from('two'), shard: false },
        ],
      },
    });
    await eventually(async () => received.length === 2);
    assert.deepEqual(received, ['from-d=one', 'from-d=two']);
    // A PublishBatch whose message field runs past its end.
    peer.socket.write(frameOf(Buffer.from([0x7a, 3, 0x0a, 0x7f, 0x00])));
    await peer.whenClosed;
    const again = await handshake(node, { id: 'd', secret: CLUSTER_SECRET });
    again.peer.send({
      publishBatch: {
        messages: [
          { channel: Buffer.from('from-d'), message: Buffer.alloc(PUBSUB_PAYLOAD_BYTES_MAX), shard: false },
        ],
      },
    });
    await again.peer.whenClosed;
    // Both were refused for what they are (not cut off earlier as unreadable frames).
    await eventually(() => cluster.nodes[0].log.split('malformed or oversized Pub/Sub batch').length === 3);
    assert.deepEqual(received, ['from-d=one', 'from-d=two'], 'nothing of a refused batch is delivered');
  });

  test('after all of it the nodes still serve, and still talk to each other', async () => {
    const info = await infoOf(cluster.nodes[0], 'replication');
    assert.match(info.get('peer_b') ?? '', /state=online/);
    const a = await cluster.nodes[0].client();
    const b = await cluster.nodes[1].client();
    assert.equal(await a.set('still', 'serving'), 'OK');
    assert.equal(await b.get('still'), 'serving');
  });
});

describe('a peer mesh over TLS (--tls-cluster)', () => {
  const fixture = (name: string) =>
    fileURLToPath(new URL(`../../../test/fixtures/tls/${name}`, import.meta.url));
  let cluster: ClusterFixture;
  before(async () => {
    cluster = await startCluster(
      'cluster-tls',
      ['a', 'b'],
      [
        '--tls-cluster',
        ...['--tls-cert-file', fixture('server.crt'), '--tls-key-file', fixture('server.key')],
        ...['--tls-ca-cert-file', fixture('ca.crt')],
        // The fixture's server certificate is for servers only: dial with the client one, as Redis's
        // tls-client-cert-file does.
        ...['--tls-client-cert-file', fixture('client.crt'), '--tls-client-key-file', fixture('client.key')],
      ],
    );
  });
  after(async () => {
    await cluster?.stop();
  });

  test('the nodes connect, replicate and relay Pub/Sub over it', async () => {
    const [a, b] = cluster.nodes;
    const keys = Array.from({ length: 50 }, (_, i) => `tls:${i}`);
    const writer = await a.client();
    for (const k of keys) assert.equal(await writer.set(k, `v-${k}`), 'OK');
    await eventually(async () => (await localValues(b, keys)).every((v, i) => v === `v-${keys[i]}`), 15_000);
    const sub = await b.client();
    const got: string[] = [];
    sub.on('message', (_channel: string, message: string) => got.push(message));
    await sub.subscribe('over-tls');
    assert.equal(await writer.publish('over-tls', 'sealed'), 0);
    await eventually(async () => got.length === 1);
    assert.deepEqual(got, ['sealed']);
  });

  test('a plaintext peer, and a TLS peer without a certificate, are refused before the handshake', async () => {
    const port = cluster.nodes[0].peerPort;
    const plain = await FakePeer.connect(port);
    plain.send({ hello: { ...freshHello('b', nonZeroChallenge()), clientPort: 0 } });
    assert.equal(await plain.next(), undefined, 'no Hello comes back: the connection is closed');
    const anonymous = tlsConnect({
      host: '127.0.0.1',
      port,
      ca: readFileSync(fixture('ca.crt')),
      checkServerIdentity: () => undefined,
    });
    const outcome = await new Promise<string>((resolve) => {
      anonymous.once('error', (err) => resolve(`error: ${err.message}`));
      anonymous.once('close', () => resolve('closed'));
      anonymous.on('data', () => resolve('data'));
    });
    anonymous.destroy();
    assert.notEqual(outcome, 'data');
    await eventually(() => cluster.nodes[0].log.split('peer TLS handshake failed').length >= 3);
    // The real peer is still connected.
    const info = await infoOf(cluster.nodes[0], 'replication');
    assert.match(info.get('peer_b') ?? '', /state=online/);
  });
});
