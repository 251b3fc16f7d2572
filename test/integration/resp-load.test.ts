// The RESP face under load and abuse: deep pipelines answered in order (DESIGN.md "Faces: RESP": a
// pipeline reads its own writes), many concurrent connections, a client that stops reading its
// replies (CONNECTION_OUTPUT_BYTES_MAX), and clients whose requests would grow the query buffer
// past RESP_CLIENT_BUFFER_BYTES_MAX or the protocol's bounds. Each abuse is checked to cost only the
// abusing connection.

import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import {
  RESP_BULK_BYTES_MAX,
  RESP_CLIENT_BUFFER_BYTES_MAX,
  RESP_INLINE_BYTES_MAX,
  RESP_MULTIBULK_ARGS_MAX,
  VALUE_BYTES_MAX_DEFAULT,
} from '../../src/core/limits.js';
import {
  CONNECTION_COMMANDS_IN_FLIGHT_MAX,
  CONNECTION_OUTPUT_BYTES_MAX,
} from '../../src/main/resp/connection.js';
import { seededFractions } from '../unit/fixtures/xorshift32.js';
import { eventually } from './helpers.js';
import { encodeCommand, type RespFixture, startResp } from './resp-helpers.js';

let fx: RespFixture;
let r: Redis;

before(async () => {
  fx = await startResp({ label: 'resp-load' });
  r = await fx.client();
});

after(async () => {
  await fx.stop();
});

type Op = { args: string[]; expected: string | number | null };

/**
 * `count` SET / GET / INCR / DEL commands over `keys` shared keys, each with the reply a sequential
 * model of Redis gives (values are always decimal, so INCR never fails).
 */
function mixedOps(prefix: string, count: number, keys: number, seed: number): Op[] {
  const random = seededFractions(seed);
  const model = new Map<string, string>();
  const ops: Op[] = [];
  for (let i = 0; i < count; i++) {
    const key = `${prefix}:${Math.floor(random() * keys)}`;
    const pick = random();
    if (pick < 0.3) {
      model.set(key, String(i));
      ops.push({ args: ['SET', key, String(i)], expected: 'OK' });
    } else if (pick < 0.65) {
      ops.push({ args: ['GET', key], expected: model.get(key) ?? null });
    } else if (pick < 0.95) {
      const next = Number(model.get(key) ?? '0') + 1;
      model.set(key, String(next));
      ops.push({ args: ['INCR', key], expected: next });
    } else {
      ops.push({ args: ['DEL', key], expected: model.delete(key) ? 1 : 0 });
    }
  }
  return ops;
}

/** The RESP2 bytes Redis answers for `op`. */
function expectedReply(op: Op): string {
  const e = op.expected;
  if (e === null) return '$-1\r\n';
  if (typeof e === 'number') return `:${e}\r\n`;
  if (e === 'OK') return '+OK\r\n';
  return `$${Buffer.byteLength(e)}\r\n${e}\r\n`;
}

describe('pipelines', () => {
  test('10 000 pipelined SET / GET / INCR / DEL on overlapping keys answer in order, each seeing the ones before', async () => {
    const seed = 20240601;
    const ops = mixedOps('pipe', 10_000, 40, seed);
    const pipeline = r.pipeline();
    for (const op of ops) pipeline.call(op.args[0], ...op.args.slice(1));
    const results = await pipeline.exec();
    assert.ok(results !== null);
    assert.equal(results.length, ops.length);
    results.forEach(([error, reply], i) => {
      assert.equal(error, null, `seed ${seed}, command ${i}: ${ops[i].args.join(' ')}`);
      assert.equal(reply, ops[i].expected, `seed ${seed}, command ${i}: ${ops[i].args.join(' ')}`);
    });
  });

  test('10 000 commands in one socket write (past the in-flight bound) are all answered, in order', async () => {
    assert.ok(10_000 > CONNECTION_COMMANDS_IN_FLIGHT_MAX, 'the pipeline must exceed the in-flight bound');
    const seed = 7;
    const ops = mixedOps('onewrite', 10_000, 25, seed);
    const raw = await fx.raw();
    raw.send(Buffer.concat(ops.map((op) => encodeCommand(op.args))));
    for (let i = 0; i < ops.length; i++) {
      const reply = (await raw.readReply()).toString('latin1');
      assert.equal(reply, expectedReply(ops[i]), `seed ${seed}, command ${i}: ${ops[i].args.join(' ')}`);
    }
    assert.equal(raw.pendingBytes, 0, 'exactly one reply per command');
  });

  test('a GET pipelined right after a SET of the same key sees that SET', async () => {
    const pipeline = r.pipeline();
    for (let i = 0; i < 500; i++) {
      pipeline.set('ryw:k', `v${i}`);
      pipeline.get('ryw:k');
      pipeline.exists('ryw:k');
      pipeline.del('ryw:k');
      pipeline.get('ryw:k');
    }
    const results = (await pipeline.exec()) ?? [];
    for (let i = 0; i < 500; i++) {
      const [set, get, exists, del, gone] = results.slice(i * 5, i * 5 + 5).map(([e, v]) => {
        assert.equal(e, null);
        return v;
      });
      assert.deepEqual([set, get, exists, del, gone], ['OK', `v${i}`, 1, 1, null], `round ${i}`);
    }
  });
  test('multi-key reads and expiry reads pipelined after writes see those writes', async () => {
    const pipeline = r.pipeline();
    for (let i = 0; i < 200; i++) {
      pipeline.set(`rywm:a${i % 7}`, `v${i}`, 'EX', 100);
      pipeline.mset(`rywm:b${i % 5}`, `w${i}`);
      pipeline.mget(`rywm:a${i % 7}`, `rywm:b${i % 5}`, 'rywm:none');
      pipeline.exists(`rywm:a${i % 7}`, `rywm:b${i % 5}`, `rywm:a${i % 7}`);
      pipeline.ttl(`rywm:a${i % 7}`);
      pipeline.strlen(`rywm:b${i % 5}`);
      pipeline.del(`rywm:a${i % 7}`, `rywm:b${i % 5}`);
      pipeline.mget(`rywm:a${i % 7}`, `rywm:b${i % 5}`);
      pipeline.exists(`rywm:a${i % 7}`);
      pipeline.ttl(`rywm:b${i % 5}`);
    }
    const results = (await pipeline.exec()) ?? [];
    for (let i = 0; i < 200; i++) {
      const replies = results.slice(i * 10, i * 10 + 10).map(([e, v]) => {
        assert.equal(e, null);
        return v;
      });
      const ttl = replies[4] as number;
      assert.ok(ttl > 90 && ttl <= 100, `round ${i}: TTL ${ttl}`);
      replies[4] = 'ttl';
      assert.deepEqual(
        replies,
        ['OK', 'OK', [`v${i}`, `w${i}`, null], 3, 'ttl', `w${i}`.length, 2, [null, null], 0, -2],
        `round ${i}`,
      );
    }
  });
});

describe('concurrent connections', () => {
  test('200 connections doing 300 commands each all succeed, and the data is consistent', async () => {
    const connections = 200;
    const rounds = 100;
    // Ten rounds (30 commands) per pipeline keep the client's round trips, not the server, from
    // dominating the test's time; the connections still interleave on the server.
    const roundsPerBatch = 10;
    const clients = await Promise.all(
      Array.from({ length: connections }, () => fx.client({ enableReadyCheck: false })),
    );
    await Promise.all(
      clients.map(async (c, n) => {
        for (let first = 0; first < rounds; first += roundsPerBatch) {
          const pipeline = c.pipeline();
          for (let j = first; j < first + roundsPerBatch; j++) {
            pipeline.set(`conc:${n}:${j % 10}`, `${n}-${j}`);
            pipeline.get(`conc:${n}:${j % 10}`);
            pipeline.incr('conc:shared');
          }
          const results = (await pipeline.exec()) ?? [];
          assert.equal(results.length, roundsPerBatch * 3);
          for (let k = 0; k < roundsPerBatch; k++) {
            const j = first + k;
            const [[setError, set], [getError, get], [incrError]] = results.slice(k * 3, k * 3 + 3);
            assert.equal(setError ?? getError ?? incrError, null);
            assert.equal(set, 'OK');
            assert.equal(get, `${n}-${j}`, 'a connection reads its own write');
          }
        }
      }),
    );
    assert.equal(await r.get('conc:shared'), String(connections * rounds), 'no increment is lost');
    const keys = clients.flatMap((_, n) => Array.from({ length: 10 }, (__, k) => `conc:${n}:${k}`));
    const values = await r.mget(...keys);
    keys.forEach((key, i) => {
      const [, n, k] = key.split(':');
      assert.equal(values[i], `${n}-${90 + Number(k)}`, key);
    });
    for (const c of clients) c.disconnect();
    await eventually(() => fx.server.connections().length < 10);
  });
});

describe('limits', () => {
  test('a client that never reads its replies is disconnected past the output limit; others keep working', async () => {
    const value = Buffer.alloc(VALUE_BYTES_MAX_DEFAULT, 0x76);
    await r.set('outlimit:big', value);
    // Enough replies to pass the limit plus whatever the kernel's socket buffers absorb.
    const gets = Math.ceil((CONNECTION_OUTPUT_BYTES_MAX + 32 * 1024 * 1024) / value.length);
    const stuck = await fx.raw();
    const id = Number((await stuck.call('CLIENT', 'ID')).slice(1, -2));
    assert.ok(fx.server.connections().some((c) => c.id === id));
    stuck.socket.pause();
    stuck.send(Buffer.concat(Array.from({ length: gets }, () => encodeCommand(['GET', 'outlimit:big']))));

    await eventually(() => !fx.server.connections().some((c) => c.id === id), 5000);
    assert.equal(await r.set('outlimit:other', 'v'), 'OK', 'other clients keep working');
    assert.equal(await r.get('outlimit:other'), 'v');

    stuck.socket.resume();
    await stuck.closedWithin();
    const replyBytes = value.length + `$${value.length}\r\n\r\n`.length;
    assert.ok(
      stuck.receivedBytes < gets * replyBytes,
      `only part of the ${gets} replies reached the client (${stuck.receivedBytes} bytes)`,
    );
  });

  test('a bulk header beyond the bulk limit answers a protocol error and closes at once', async () => {
    const raw = await fx.raw();
    raw.send(`*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$${RESP_BULK_BYTES_MAX + 1}\r\n`);
    assert.equal((await raw.readReply()).toString(), '-ERR Protocol error: invalid bulk length\r\n');
    await raw.closedWithin();
    const huge = await fx.raw();
    huge.send('*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$99999999999999\r\n');
    assert.equal((await huge.readReply()).toString(), '-ERR Protocol error: invalid bulk length\r\n');
    await huge.closedWithin();
    assert.equal(await r.ping(), 'PONG');
  });

  test('a multibulk count beyond the argument limit answers a protocol error and closes', async () => {
    const raw = await fx.raw();
    raw.send(`*${RESP_MULTIBULK_ARGS_MAX + 1}\r\n`);
    assert.equal((await raw.readReply()).toString(), '-ERR Protocol error: invalid multibulk length\r\n');
    await raw.closedWithin();
  });

  test('an inline request longer than the inline limit answers a protocol error and closes', async () => {
    const raw = await fx.raw();
    raw.send(Buffer.alloc(RESP_INLINE_BYTES_MAX + 1024, 0x61));
    assert.equal((await raw.readReply()).toString(), '-ERR Protocol error: too big inline request\r\n');
    await raw.closedWithin();
  });

  test('an unfinished command is held while it fits the query buffer, then completes', async () => {
    const raw = await fx.raw();
    const value = Buffer.alloc(3 * 1024 * 1024, 0x71);
    const request = encodeCommand(['SET', 'qbuf:partial', value]);
    const id = Number((await raw.call('CLIENT', 'ID')).slice(1, -2));
    const conn = fx.server.connections().find((c) => c.id === id);
    assert.ok(conn);
    const socket = conn.socket as Socket;
    const readBefore = socket.bytesRead;
    raw.send(request.subarray(0, request.length >> 1));
    // The server has read the first half (and parsed it: its handler runs on every read); a round trip
    // on another connection gives a reply it sent time to arrive.
    await eventually(() => socket.bytesRead - readBefore === request.length >> 1);
    assert.equal(await r.ping(), 'PONG');
    assert.ok(
      fx.server.connections().some((c) => c.id === id),
      'still connected mid-command',
    );
    assert.equal(raw.pendingBytes, 0, 'no reply to half a command');
    raw.send(request.subarray(request.length >> 1));
    assert.equal((await raw.readReply()).toString(), '+OK\r\n');
    assert.equal(await r.strlen('qbuf:partial'), value.length);
  });

  test('an unfinished command that grows past the query-buffer limit closes the connection', async () => {
    const raw = await fx.raw();
    const id = Number((await raw.call('CLIENT', 'ID')).slice(1, -2));
    // Bulks under the bulk limit, each complete, in a command announcing more arguments than sent.
    const bulk = Buffer.alloc(RESP_BULK_BYTES_MAX - 1024, 0x7a);
    const bulks = Math.ceil(RESP_CLIENT_BUFFER_BYTES_MAX / bulk.length) + 1;
    raw.send(`*${bulks + 10}\r\n$3\r\nSET\r\n`);
    const frame = Buffer.concat([Buffer.from(`$${bulk.length}\r\n`), bulk, Buffer.from('\r\n')]);
    for (let i = 0; i < bulks && !raw.closed; i++) raw.send(frame);
    await raw.closedWithin();
    assert.ok(!fx.server.connections().some((c) => c.id === id));
    assert.equal(raw.pendingBytes, 0, 'closed without a reply');
    assert.equal(await r.ping(), 'PONG', 'others keep working');
  });
});
