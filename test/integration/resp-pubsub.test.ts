// Pub/Sub over RESP against a Tessera node and, where it is installed, a real redis-server: each
// scenario drives several raw connections in a fixed order and records every reply it reads; both
// servers must produce the same transcript, and the key replies are also written out as the exact
// bytes a client receives. Then what only Tessera can show: ioredis as a subscriber, the order of a
// push among deferred replies, the message size limit, and a subscriber that stops reading.
// Without redis-server on PATH only Tessera is checked, unless TESSERA_REQUIRE_REDIS_TOOLS=1 (CI).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PUBSUB_PAYLOAD_BYTES_MAX } from '../../src/core/limits.js';
import { CONNECTION_OUTPUT_BYTES_MAX } from '../../src/main/resp/connection.js';
import { eventually } from './helpers.js';
import {
  type ComparedServer,
  comparedServers,
  encodeCommand,
  type RawClient,
  type RedisServer,
  type RespFixture,
  redisServerSkip,
  replyDifferences,
  startRedisServer,
  startResp,
} from './resp-helpers.js';

const redisSkip = redisServerSkip();

let fixture: RespFixture;
let redisServer: RedisServer | undefined;

before(async () => {
  fixture = await startResp({ label: 'resp-pubsub', node: { store: 'memory' } });
  if (redisSkip === false) redisServer = await startRedisServer('resp-pubsub-redis');
});

after(async () => {
  await redisServer?.stop();
  await fixture?.stop();
});

const servers = () => comparedServers(fixture, redisServer);

const bulk = (s: string) => `$${s.length}\r\n${s}\r\n`;
/** A confirmation or message as a RESP2 client reads it (`*`), or a RESP3 one (`>`). */
const push = (head: '*' | '>', ...parts: Array<string | number | null>) =>
  `${head}${parts.length}\r\n${parts.map((p) => (p === null ? '$-1\r\n' : typeof p === 'number' ? `:${p}\r\n` : bulk(p))).join('')}`;
const REFUSED = (name: string) =>
  `-ERR Can't execute '${name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n`;

/**
 * A scenario's driver: `c(i)` is its i-th connection (opened on first use); `run(i, replies, …args)`
 * sends a command on connection i and reads `replies` replies from it, each recorded in the
 * transcript; `read(i, n)` reads n more (messages published by another connection).
 */
class Script {
  readonly transcript: string[] = [];
  private readonly conns: RawClient[] = [];

  constructor(private readonly server: ComparedServer) {}

  async c(i: number): Promise<RawClient> {
    while (this.conns.length <= i) this.conns.push(await this.server.raw());
    return this.conns[i];
  }

  async run(i: number, replies: number, ...args: string[]): Promise<string[]> {
    (await this.c(i)).sendCommand(...args);
    return this.read(i, replies, args.join(' '));
  }

  /** Closes every connection, then waits until the server holds no subscription at all. */
  async close(): Promise<void> {
    for (const c of this.conns) c.destroy();
    const probe = await this.server.raw();
    await eventually(
      async () =>
        (await probe.call('PUBSUB', 'NUMPAT')) === ':0\r\n' &&
        (await probe.call('PUBSUB', 'CHANNELS')) === '*0\r\n' &&
        (await probe.call('PUBSUB', 'SHARDCHANNELS')) === '*0\r\n',
    );
    probe.destroy();
  }

  async read(i: number, n: number, label = 'read'): Promise<string[]> {
    const got: string[] = [];
    for (let k = 0; k < n; k++) got.push((await (await this.c(i)).readReply()).toString('latin1'));
    this.transcript.push(`${i}> ${label}: ${got.join('')}`);
    return got;
  }
}

/** Runs `scenario` against every server; their transcripts must agree. */
async function sameOnEveryServer(scenario: (s: Script, server: string) => Promise<void>): Promise<void> {
  const transcripts: Array<[string, string[]]> = [];
  for (const server of servers()) {
    const script = new Script(server);
    await scenario(script, server.name);
    await script.close();
    transcripts.push([server.name, script.transcript]);
  }
  for (const [name, transcript] of transcripts.slice(1))
    assert.deepEqual(transcript, transcripts[0][1], name);
}

describe('Pub/Sub over RESP2', () => {
  test('subscriptions are confirmed with their counts; a subscribed client may run only the subscription commands, PING, QUIT and RESET', async () => {
    await sameOnEveryServer(async (s, name) => {
      assert.deepEqual(
        await s.run(0, 3, 'SUBSCRIBE', 'a', 'b', 'a'),
        [push('*', 'subscribe', 'a', 1), push('*', 'subscribe', 'b', 2), push('*', 'subscribe', 'a', 2)],
        name,
      );
      // Patterns count with channels; shard channels apart.
      assert.deepEqual(await s.run(0, 2, 'PSUBSCRIBE', 'p*', 'a'), [
        push('*', 'psubscribe', 'p*', 3),
        push('*', 'psubscribe', 'a', 4),
      ]);
      assert.deepEqual(await s.run(0, 2, 'SSUBSCRIBE', 's1', 's2'), [
        push('*', 'ssubscribe', 's1', 1),
        push('*', 'ssubscribe', 's2', 2),
      ]);
      assert.deepEqual(await s.run(0, 1, 'GET', 'x'), [REFUSED('get')], name);
      assert.deepEqual(await s.run(0, 1, 'CLIENT', 'ID'), [REFUSED('client|id')], name);
      await s.run(0, 1, 'HELLO', '3');
      await s.run(0, 1, 'CONFIG', 'GET', 'port');
      await s.run(0, 1, 'ECHO', 'x');
      // Unknown commands and arity errors are answered as such first.
      await s.run(0, 1, 'NOSUCHCOMMAND');
      await s.run(0, 1, 'CLIENT');
      assert.deepEqual(await s.run(0, 1, 'PING'), ['*2\r\n$4\r\npong\r\n$0\r\n\r\n'], name);
      assert.deepEqual(await s.run(0, 1, 'PING', 'hi'), ['*2\r\n$4\r\npong\r\n$2\r\nhi\r\n'], name);
      assert.deepEqual(await s.run(0, 1, 'UNSUBSCRIBE', 'zz'), [push('*', 'unsubscribe', 'zz', 4)], name);
      await s.run(0, 2, 'SUNSUBSCRIBE', 's1', 's2');
      await s.run(0, 2, 'UNSUBSCRIBE', 'a', 'b');
      await s.run(0, 1, 'PUNSUBSCRIBE', 'p*');
      // Without names: every one of the kind, or one confirmation with nil when there is none.
      assert.deepEqual(await s.run(0, 1, 'PUNSUBSCRIBE'), [push('*', 'punsubscribe', 'a', 0)], name);
      assert.deepEqual(await s.run(0, 1, 'PUNSUBSCRIBE'), [push('*', 'punsubscribe', null, 0)], name);
      assert.deepEqual(await s.run(0, 1, 'UNSUBSCRIBE'), [push('*', 'unsubscribe', null, 0)], name);
      // With nothing left the client is an ordinary one again.
      assert.deepEqual(await s.run(0, 1, 'GET', 'x'), ['$-1\r\n'], name);
      assert.deepEqual(await s.run(0, 1, 'PING'), ['+PONG\r\n'], name);
      // QUIT is allowed while subscribed.
      await s.run(1, 1, 'SUBSCRIBE', 'q');
      assert.deepEqual(await s.run(1, 1, 'QUIT'), ['+OK\r\n'], name);
      await (await s.c(1)).closedWithin();
    });
  });

  test('a message reaches channel and pattern subscribers; PUBLISH answers how many received it; PUBSUB reports what is active', async () => {
    await sameOnEveryServer(async (s, name) => {
      await s.run(0, 1, 'SUBSCRIBE', 'news');
      await s.run(0, 1, 'PSUBSCRIBE', 'n*');
      await s.run(0, 1, 'SSUBSCRIBE', 'sh');
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'news', 'hello'), [':2\r\n'], name);
      assert.deepEqual(
        await s.read(0, 2),
        [push('*', 'message', 'news', 'hello'), push('*', 'pmessage', 'n*', 'news', 'hello')],
        name,
      );
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'nope', 'x'), [':1\r\n'], name);
      await s.read(0, 1);
      assert.deepEqual(await s.run(1, 1, 'SPUBLISH', 'sh', 'm1'), [':1\r\n'], name);
      assert.deepEqual(await s.read(0, 1), [push('*', 'smessage', 'sh', 'm1')], name);
      // A shard channel is not a channel, and patterns do not see shard messages.
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'sh', 'x'), [':0\r\n'], name);
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'other', 'x'), [':0\r\n'], name);
      await s.run(1, 1, 'PUBSUB', 'CHANNELS');
      await s.run(1, 1, 'PUBSUB', 'CHANNELS', 'n*');
      await s.run(1, 1, 'PUBSUB', 'CHANNELS', 'x*');
      assert.deepEqual(
        await s.run(1, 1, 'PUBSUB', 'NUMSUB', 'news', 'nope'),
        [`*4\r\n${bulk('news')}:1\r\n${bulk('nope')}:0\r\n`],
        name,
      );
      assert.deepEqual(await s.run(1, 1, 'PUBSUB', 'NUMPAT'), [':1\r\n'], name);
      await s.run(1, 1, 'PUBSUB', 'SHARDCHANNELS');
      await s.run(1, 1, 'PUBSUB', 'SHARDNUMSUB', 'sh', 'x');
      // Binary and empty names and messages travel exactly.
      await s.run(2, 1, 'SUBSCRIBE', '\u00ff\u0000\r\n');
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', '\u00ff\u0000\r\n', ''), [':1\r\n'], name);
      await s.read(2, 1);
      // Nothing else arrived at the first subscriber: the next thing it reads is its PING's answer.
      assert.deepEqual(await s.run(0, 1, 'PING'), ['*2\r\n$4\r\npong\r\n$0\r\n\r\n'], name);
    });
  });

  test('distinct patterns count once; a closed or killed subscriber leaves nothing behind', async () => {
    await sameOnEveryServer(async (s, name) => {
      await s.run(0, 2, 'PSUBSCRIBE', 'x', 'y');
      await s.run(1, 1, 'PSUBSCRIBE', 'x');
      await s.run(2, 1, 'SUBSCRIBE', 'c');
      await s.run(2, 2, 'SUBSCRIBE', 'c', 'd');
      assert.deepEqual(await s.run(3, 1, 'PUBSUB', 'NUMPAT'), [':2\r\n'], name);
      await s.run(3, 1, 'PUBSUB', 'NUMSUB', 'c', 'd', 'e');
      assert.deepEqual(await s.run(3, 1, 'PUBLISH', 'x', 'm'), [':2\r\n'], name);
      await s.read(0, 1);
      await s.read(1, 1);
      assert.deepEqual(await s.run(3, 1, 'CLIENT', 'KILL', 'TYPE', 'pubsub'), [':3\r\n'], name);
      for (const i of [0, 1, 2]) await (await s.c(i)).closedWithin();
      await eventually(async () => (await (await s.c(3)).call('PUBSUB', 'NUMPAT')) === ':0\r\n');
      assert.deepEqual(await s.run(3, 1, 'PUBSUB', 'CHANNELS'), ['*0\r\n'], name);
      assert.deepEqual(await s.run(3, 1, 'PUBLISH', 'c', 'm'), [':0\r\n'], name);
      // A client that leaves its subscriptions by closing is gone from the tables too.
      await s.run(4, 1, 'SUBSCRIBE', 'gone');
      (await s.c(4)).destroy();
      await eventually(async () => (await (await s.c(3)).call('PUBLISH', 'gone', 'm')) === ':0\r\n');
    });
  });
});

describe('Pub/Sub over RESP3', () => {
  test('confirmations and messages are pushes; any command may run; a message to itself comes before the reply', async () => {
    await sameOnEveryServer(async (s, name) => {
      (await s.c(0)).sendCommand('HELLO', '3');
      await (await s.c(0)).readReply();
      assert.deepEqual(await s.run(0, 1, 'SUBSCRIBE', 'a'), [push('>', 'subscribe', 'a', 1)], name);
      await s.run(0, 1, 'PSUBSCRIBE', 'a*');
      assert.deepEqual(await s.run(0, 1, 'GET', 'x'), ['_\r\n'], name);
      assert.deepEqual(await s.run(0, 1, 'PING'), ['+PONG\r\n'], name);
      assert.deepEqual(
        await s.run(0, 3, 'PUBLISH', 'a', 'hi'),
        [push('>', 'message', 'a', 'hi'), push('>', 'pmessage', 'a*', 'a', 'hi'), ':2\r\n'],
        name,
      );
      await s.run(0, 1, 'PUBSUB', 'NUMSUB', 'a');
      await s.run(0, 1, 'UNSUBSCRIBE');
      await s.run(0, 1, 'PUNSUBSCRIBE');
      await s.run(0, 1, 'SUBSCRIBE', 'b');
      // RESET leaves every subscription without a confirmation, and RESP2 again.
      assert.deepEqual(await s.run(0, 1, 'RESET'), ['+RESET\r\n'], name);
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'b', 'x'), [':0\r\n'], name);
      assert.deepEqual(await s.run(0, 1, 'PING'), ['+PONG\r\n'], name);
    });
  });

  test('pushes are sent while CLIENT REPLY is OFF, as Redis 7 sends them', async () => {
    await sameOnEveryServer(async (s, name) => {
      (await s.c(0)).sendCommand('HELLO', '3');
      await (await s.c(0)).readReply();
      (await s.c(0)).sendCommand('CLIENT', 'REPLY', 'OFF');
      assert.deepEqual(await s.run(0, 1, 'SUBSCRIBE', 'off'), [push('>', 'subscribe', 'off', 1)], name);
      assert.deepEqual(await s.run(1, 1, 'PUBLISH', 'off', 'x'), [':1\r\n'], name);
      assert.deepEqual(await s.read(0, 1), [push('>', 'message', 'off', 'x')], name);
      // Its own PUBLISH: the message arrives, the count does not.
      (await s.c(0)).sendCommand('PUBLISH', 'off', 'self');
      assert.deepEqual(
        await s.run(0, 1, 'CLIENT', 'REPLY', 'ON'),
        [push('>', 'message', 'off', 'self')],
        name,
      );
      assert.deepEqual(await s.read(0, 1), ['+OK\r\n'], name);
      // Behind a reply still owed (DBSIZE asks the workers), in one pipeline.
      (await s.c(1)).sendCommand('HELLO', '3');
      await (await s.c(1)).readReply();
      (await s.c(1)).send(
        Buffer.concat(
          [['CLIENT', 'REPLY', 'OFF'], ['DBSIZE'], ['SUBSCRIBE', 'behind'], ['CLIENT', 'REPLY', 'ON']].map(
            (args) => encodeCommand(args),
          ),
        ),
      );
      assert.deepEqual(await s.read(1, 2), [push('>', 'subscribe', 'behind', 1), '+OK\r\n'], name);
    });
  });
});

// Argument errors and edge cases: replies compared byte for byte with redis-server's.
const EDGE_CASES = [
  'PUBSUB',
  'PUBSUB FOO',
  'PUBSUB HELP',
  'PUBSUB HELP x',
  'PUBSUB NUMPAT x',
  'PUBSUB CHANNELS a b',
  'PUBSUB channels a b',
  'PUBSUB SHARDCHANNELS a b',
  'PUBSUB NUMSUB',
  'PUBSUB SHARDNUMSUB',
  'PUBSUB NUMSUB a a',
  'PUBLISH a',
  'PUBLISH a b c',
  'SPUBLISH a',
  'SUBSCRIBE',
  'PSUBSCRIBE',
  'SSUBSCRIBE',
  'UNSUBSCRIBE',
  'UNSUBSCRIBE x y',
  'SUNSUBSCRIBE',
  'PUNSUBSCRIBE x',
  'PUBLISH nobody listening',
  'SPUBLISH nobody listening',
];

test('Pub/Sub argument errors and edge cases get the same replies as from redis-server', {
  skip: redisSkip,
}, async () => {
  // An UNSUBSCRIBE of several names answers once per name.
  const repliesOf = (args: string[]) => (args[0].endsWith('UNSUBSCRIBE') ? Math.max(1, args.length - 1) : 1);
  assert.deepEqual(
    await replyDifferences(await fixture.raw(), await redisServer!.raw(), EDGE_CASES, repliesOf),
    [],
  );
});

describe('Pub/Sub on Tessera', () => {
  test('ioredis subscribes, receives messages and pattern messages, binary ones too', async () => {
    const sub = await fixture.client();
    const pub = await fixture.client();
    const received: string[] = [];
    sub.on('message', (channel: string, message: string) => received.push(`${channel}=${message}`));
    sub.on('pmessageBuffer', (pattern: Buffer, channel: Buffer, message: Buffer) =>
      received.push(`${pattern}|${channel}=${message.toString('hex')}`),
    );
    assert.equal(await sub.subscribe('io:a', 'io:b'), 2);
    assert.equal(await sub.psubscribe('io:*'), 3);
    assert.equal(await pub.publish('io:a', 'one'), 2);
    assert.equal(await pub.publish('io:c', Buffer.from([0, 255])), 1);
    assert.equal(await pub.publish('io:b', 'two'), 2);
    await eventually(async () => received.length === 5);
    assert.deepEqual(received, [
      'io:a=one',
      'io:*|io:a=6f6e65',
      'io:*|io:c=00ff',
      'io:b=two',
      'io:*|io:b=74776f',
    ]);
    assert.deepEqual(await pub.pubsub('NUMSUB', 'io:a', 'io:c'), ['io:a', 1, 'io:c', 0]);
    const info = await pub.info('stats');
    assert.match(info, /\r\npubsub_channels:2\r\npubsub_patterns:1\r\npubsubshard_channels:0\r\n/);
    const list = await pub.client('LIST');
    assert.match(String(list), /flags=P db=0 sub=2 psub=1 ssub=0 /);
    assert.equal(await sub.unsubscribe('io:a', 'io:b'), 1);
    assert.equal(await sub.punsubscribe('io:*'), 0);
    assert.equal(await pub.publish('io:a', 'three'), 0);
  });

  test('a push to a connection waits behind the replies it still owes, in order', async () => {
    const c = await fixture.raw();
    assert.match(await c.call('HELLO', '3'), /^%7/);
    c.sendCommand('SUBSCRIBE', 'order');
    await c.readReply();
    // DBSIZE asks every worker, so its reply is still owed when the PUBLISH after it runs.
    c.send(
      Buffer.concat([
        Buffer.from('*1\r\n$6\r\nDBSIZE\r\n'),
        Buffer.from('*3\r\n$7\r\nPUBLISH\r\n$5\r\norder\r\n$1\r\nm\r\n'),
      ]),
    );
    const [dbsize, message, count] = [await c.readReply(), await c.readReply(), await c.readReply()];
    assert.match(dbsize.toString(), /^:\d+\r\n$/);
    assert.equal(message.toString(), push('>', 'message', 'order', 'm'));
    assert.equal(count.toString(), ':1\r\n');
  });

  test('a message larger than the limit is refused with an error', async () => {
    const c = await fixture.raw();
    const big = Buffer.alloc(PUBSUB_PAYLOAD_BYTES_MAX, 0x61);
    assert.equal(
      await c.call('PUBLISH', 'x', big),
      `-ERR channel and message exceed ${PUBSUB_PAYLOAD_BYTES_MAX} bytes\r\n`,
    );
    assert.equal(await c.call('PUBLISH', '', big), ':0\r\n', 'at the limit it is published');
  });

  test('a subscriber that stops reading is disconnected past the output limit; the publisher goes on', async () => {
    const slow = await fixture.raw();
    slow.sendCommand('SUBSCRIBE', 'flood');
    await slow.readReply();
    slow.socket.pause();
    const pub = await fixture.raw();
    const message = Buffer.alloc(1024 * 1024, 0x62);
    let published = 0;
    // Past the limit by a margin for what the sockets' kernel buffers hold.
    while (!slow.closed && published < CONNECTION_OUTPUT_BYTES_MAX / message.length + 64) {
      await pub.call('PUBLISH', 'flood', message);
      published++;
    }
    slow.socket.resume();
    await slow.closedWithin();
    assert.equal(await pub.call('PUBLISH', 'flood', 'after'), ':0\r\n');
  });
});
