// Every command the RESP face implements, with its options and errors, against a live server through
// ioredis (and a raw socket where the exact bytes matter). Expected replies are Redis 7.2's: checked
// against a real redis-server (7.0) and Redis 7.2's sources where the two differ. Where Tessera
// deliberately differs (one database, MSETNX within one slot, SCAN cursors from a table, commands it
// cannot honour, its own key and value limits) the test says so.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { VALUE_BYTES_MAX_DEFAULT } from '../../src/core/limits.js';
import { eventually } from './helpers.js';
import { type RespFixture, rejectsWith, startResp } from './resp-helpers.js';

const NOT_INTEGER = 'ERR value is not an integer or out of range';
const SYNTAX = 'ERR syntax error';
const TOO_LARGE = 'ERR string exceeds maximum allowed size (proto-max-bulk-len)';
const arity = (name: string) => `ERR wrong number of arguments for '${name}' command`;

/** A TTL just set to `seconds` (Redis rounds to the nearest second), with slack for a slow machine. */
function assertTtlNear(ttl: number, seconds: number, message?: string): void {
  assert.ok(
    ttl <= seconds && ttl >= seconds - Math.max(1, seconds / 10),
    `TTL ${ttl}, set ${seconds}. ${message ?? ''}`,
  );
}

/** A PTTL just set to `ms`, with slack for a slow machine. */
function assertPttlNear(pttl: number, ms: number): void {
  assert.ok(pttl <= ms && pttl > ms / 2, `PTTL ${pttl}, set ${ms}`);
}

let fx: RespFixture;
let r: Redis;

before(async () => {
  fx = await startResp({ label: 'resp-commands' });
  r = await fx.client();
});

after(async () => {
  await fx.stop();
});

describe('connection commands', () => {
  test('PING answers PONG, PING msg echoes msg, PING with two arguments is an arity error', async () => {
    assert.equal(await r.ping(), 'PONG');
    assert.equal(await r.call('PING', 'hello'), 'hello');
    await rejectsWith(r.call('PING', 'a', 'b'), arity('ping'));
  });

  test('PING answers +PONG as a simple string and PING msg as a bulk string', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('PING'), '+PONG\r\n');
    assert.equal(await raw.call('PING', 'hi'), '$2\r\nhi\r\n');
  });

  test('ECHO returns its argument; without one it is an arity error', async () => {
    assert.equal(await r.echo('hi there'), 'hi there');
    await rejectsWith(r.call('ECHO'), arity('echo'));
  });

  test('SELECT 0 is OK; SELECT 1 is out of range (one database, as Redis with databases 1)', async () => {
    assert.equal(await r.select(0), 'OK');
    await rejectsWith(r.select(1), 'ERR DB index is out of range');
    await rejectsWith(r.call('SELECT', 'x'), NOT_INTEGER);
    assert.equal(await r.set('select:after', 'v'), 'OK', 'the connection still works');
  });

  test('a node without peers answers CLUSTER and READONLY as Redis without cluster support', async () => {
    await rejectsWith(r.call('CLUSTER', 'SLOTS'), 'ERR This instance has cluster support disabled');
    await rejectsWith(r.call('CLUSTER', 'KEYSLOT', 'x'), 'ERR This instance has cluster support disabled');
    await rejectsWith(r.call('READONLY'), 'ERR This instance has cluster support disabled');
    assert.match((await r.info('cluster')) as string, /cluster_enabled:0/);
  });

  test('QUIT answers OK, closes the connection, and runs nothing pipelined after it', async () => {
    const raw = await fx.raw();
    raw.send(
      Buffer.concat([
        Buffer.from('*3\r\n$3\r\nSET\r\n$6\r\nquit:a\r\n$1\r\n1\r\n'),
        Buffer.from('*1\r\n$4\r\nQUIT\r\n'),
        Buffer.from('*3\r\n$3\r\nSET\r\n$6\r\nquit:b\r\n$1\r\n1\r\n'),
      ]),
    );
    assert.equal((await raw.readReply()).toString(), '+OK\r\n');
    assert.equal((await raw.readReply()).toString(), '+OK\r\n');
    await raw.closedWithin();
    assert.equal(raw.pendingBytes, 0, 'nothing after QUIT is answered');
    assert.equal(await r.get('quit:a'), '1');
    assert.equal(await r.get('quit:b'), null, 'the command after QUIT never ran');
  });

  test('RESET answers +RESET and restores RESP2, no name and the node durability', async () => {
    const raw = await fx.raw();
    assert.match(await raw.call('HELLO', '3'), /^%7\r\n/);
    assert.equal(await raw.call('CLIENT', 'SETNAME', 'before-reset'), '+OK\r\n');
    assert.equal(await raw.call('TESSERA.DURABILITY', 'memory'), '+OK\r\n');
    assert.equal(await raw.call('RESET'), '+RESET\r\n');
    assert.equal(await raw.call('GET', 'reset:missing'), '$-1\r\n', 'back to RESP2 nulls');
    assert.equal(await raw.call('CLIENT', 'GETNAME'), '$-1\r\n');
    assert.equal(await raw.call('TESSERA.DURABILITY'), '$5\r\nstore\r\n');
    await rejectsWith(r.call('RESET', 'x'), arity('reset'));
  });
});

describe('HELLO and RESP3', () => {
  test('HELLO 3 answers a % map and switches the connection to RESP3 replies', async () => {
    const raw = await fx.raw();
    const hello = await raw.call('HELLO', '3');
    assert.ok(
      hello.startsWith(
        '%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:',
      ),
      hello,
    );
    assert.ok(
      hello.endsWith(
        '$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n',
      ),
      hello,
    );
    assert.equal(await raw.call('GET', 'hello3:missing'), '_\r\n', 'a RESP3 null');
    assert.equal(await raw.call('MGET', 'hello3:missing'), '*1\r\n_\r\n');
    assert.equal(await raw.call('CLIENT', 'GETNAME'), '_\r\n');
    assert.equal(await raw.call('CONFIG', 'GET', 'maxmemory'), '%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n');
    assert.equal(await raw.call('SET', 'hello3:k', 'v'), '+OK\r\n');
    assert.equal(await raw.call('GET', 'hello3:k'), '$1\r\nv\r\n');
    assert.equal(await raw.call('INCR', 'hello3:n'), ':1\r\n');
    assert.match(await raw.call('INFO', 'server'), /^=\d+\r\ntxt:# Server\r\n/, 'INFO is a verbatim string');
  });

  test('HELLO without a version reports the current protocol; HELLO 2 returns to RESP2', async () => {
    const raw = await fx.raw();
    assert.match(await raw.call('HELLO'), /^\*14\r\n.*\$5\r\nproto\r\n:2\r\n/s);
    await raw.call('HELLO', '3');
    assert.match(await raw.call('HELLO'), /^%7\r\n.*\$5\r\nproto\r\n:3\r\n/s);
    assert.match(await raw.call('HELLO', '2'), /^\*14\r\n/);
    assert.equal(await raw.call('GET', 'hello2:missing'), '$-1\r\n');
  });

  test('HELLO 4 answers NOPROTO and leaves the protocol as it was', async () => {
    const raw = await fx.raw();
    await raw.call('HELLO', '3');
    assert.equal(await raw.call('HELLO', '4'), '-NOPROTO unsupported protocol version\r\n');
    assert.equal(await raw.call('GET', 'hello4:missing'), '_\r\n');
  });

  test('HELLO with a bad version or option answers Redis errors', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('HELLO', 'x'), '-ERR Protocol version is not an integer or out of range\r\n');
    assert.equal(await raw.call('HELLO', '2', 'FOO'), "-ERR Syntax error in HELLO option 'FOO'\r\n");
    assert.equal(await raw.call('HELLO', '2', 'SETNAME'), "-ERR Syntax error in HELLO option 'SETNAME'\r\n");
    assert.equal(
      await raw.call('HELLO', '3', 'AUTH', 'default'),
      "-ERR Syntax error in HELLO option 'AUTH'\r\n",
    );
  });

  test('HELLO 3 SETNAME names the connection', async () => {
    const raw = await fx.raw();
    assert.match(await raw.call('HELLO', '3', 'SETNAME', 'named-by-hello'), /^%7\r\n/);
    assert.equal(await raw.call('CLIENT', 'GETNAME'), '$14\r\nnamed-by-hello\r\n');
  });
});

describe('SET and its options', () => {
  test('GET of a missing key is null; SET then GET returns the value', async () => {
    assert.equal(await r.get('set:missing'), null);
    assert.equal(await r.set('set:k', 'v'), 'OK');
    assert.equal(await r.get('set:k'), 'v');
    assert.equal(await r.set('set:k', 'v2'), 'OK');
    assert.equal(await r.get('set:k'), 'v2');
  });

  test('SET EX / PX give a time to live; EXAT / PXAT an absolute deadline', async () => {
    await r.set('set:ex', 'v', 'EX', 100);
    assertTtlNear(await r.ttl('set:ex'), 100);
    await r.set('set:px', 'v', 'PX', 50_000);
    assertPttlNear(await r.pttl('set:px'), 50_000);
    await r.call('SET', 'set:exat', 'v', 'EXAT', '4102444800');
    assert.equal(await r.call('EXPIRETIME', 'set:exat'), 4102444800);
    await r.call('SET', 'set:pxat', 'v', 'PXAT', '4102444800123');
    assert.equal(await r.call('PEXPIRETIME', 'set:pxat'), 4102444800123);
  });

  test('SET options are case-insensitive', async () => {
    assert.equal(await r.call('set', 'set:case', 'v', 'ex', '100'), 'OK');
    assert.equal(await r.call('set', 'set:case', 'v', 'nx'), null);
    assert.equal(await r.call('SeT', 'set:case', 'v2', 'xX', 'gEt'), 'v');
  });

  test('SET with an expiry already past (PXAT 1) answers OK and leaves no key', async () => {
    await r.set('set:past', 'old');
    assert.equal(await r.call('SET', 'set:past', 'v', 'PXAT', '1'), 'OK');
    assert.equal(await r.get('set:past'), null);
    assert.equal(await r.exists('set:past'), 0);
  });

  test('SET NX sets only a missing key; SET XX only an existing one (null when not set)', async () => {
    assert.equal(await r.set('set:nx', 'a', 'NX'), 'OK');
    assert.equal(await r.set('set:nx', 'b', 'NX'), null);
    assert.equal(await r.get('set:nx'), 'a');
    assert.equal(await r.set('set:xx', 'a', 'XX'), null);
    assert.equal(await r.exists('set:xx'), 0);
    await r.set('set:xx', 'a');
    assert.equal(await r.set('set:xx', 'b', 'XX'), 'OK');
    assert.equal(await r.get('set:xx'), 'b');
  });

  test('SET GET returns the old value (null when missing), with NX and XX too', async () => {
    assert.equal(await r.call('SET', 'set:get', 'v1', 'GET'), null);
    assert.equal(await r.call('SET', 'set:get', 'v2', 'GET'), 'v1');
    assert.equal(await r.call('SET', 'set:get', 'v3', 'NX', 'GET'), 'v2', 'NX fails but GET still answers');
    assert.equal(await r.get('set:get'), 'v2');
    assert.equal(await r.call('SET', 'set:get-missing', 'v', 'XX', 'GET'), null);
    assert.equal(await r.exists('set:get-missing'), 0);
    assert.equal(await r.call('SET', 'set:get-new', 'v', 'NX', 'GET'), null);
    assert.equal(await r.get('set:get-new'), 'v');
  });

  test('SET without KEEPTTL clears a time to live; with KEEPTTL keeps it', async () => {
    await r.set('set:keepttl', 'v', 'EX', 100);
    assert.equal(await r.call('SET', 'set:keepttl', 'v2', 'KEEPTTL'), 'OK');
    assertTtlNear(await r.ttl('set:keepttl'), 100);
    assert.equal(await r.get('set:keepttl'), 'v2');
    await r.set('set:keepttl', 'v3');
    assert.equal(await r.ttl('set:keepttl'), -1, 'a plain SET removes the deadline');
    await r.set('set:keepttl', 'v', 'EX', 100);
    await r.set('set:keepttl', 'v4', 'XX');
    assert.equal(await r.ttl('set:keepttl'), -1, 'SET XX without KEEPTTL removes it too');
    assert.equal(await r.call('SET', 'set:keepttl-new', 'v', 'KEEPTTL'), 'OK');
    assert.equal(await r.ttl('set:keepttl-new'), -1, 'KEEPTTL on a new key: no deadline');
  });

  test('SET with conflicting or incomplete options answers a syntax error and writes nothing', async () => {
    for (const options of [
      ['NX', 'XX'],
      ['XX', 'NX'],
      ['EX', '10', 'PX', '100'],
      ['EX', '10', 'EXAT', '4102444800'],
      ['EX', '10', 'KEEPTTL'],
      ['KEEPTTL', 'EX', '10'],
      ['KEEPTTL', 'PXAT', '4102444800123'],
      ['EX'],
      ['BOGUS'],
      ['NX', 'GET', 'EX'],
    ]) {
      await rejectsWith(r.call('SET', 'set:syntax', 'v', ...options), SYNTAX);
    }
    assert.equal(await r.exists('set:syntax'), 0);
  });

  test('SET takes an option twice, and of a repeated expiry only the last number counts', async () => {
    assert.equal(await r.call('SET', 'set:twice', 'v', 'NX', 'NX', 'GET', 'GET'), null);
    assert.equal(await r.call('SET', 'set:twice', 'w', 'XX', 'XX', 'KEEPTTL', 'KEEPTTL'), 'OK');
    assert.equal(await r.call('SET', 'set:twice', 'x', 'EX', 'bad', 'EX', '100'), 'OK');
    assertTtlNear(await r.ttl('set:twice'), 100, 'the later EX');
    await rejectsWith(r.call('SET', 'set:twice', 'y', 'EX', '100', 'EX', 'bad'), NOT_INTEGER);
    // Options are all read before any number: a syntax error wins over a bad number.
    await rejectsWith(r.call('SET', 'set:twice', 'y', 'EX', 'bad', 'PX', '100'), SYNTAX);
    assert.equal(await r.get('set:twice'), 'x');
  });

  test('SET with a zero, negative or non-integer expiry answers Redis errors', async () => {
    const invalid = "ERR invalid expire time in 'set' command";
    for (const [unit, n] of [
      ['EX', '0'],
      ['EX', '-1'],
      ['PX', '0'],
      ['PX', '-100'],
      ['EXAT', '0'],
      ['PXAT', '-1'],
    ]) {
      await rejectsWith(r.call('SET', 'set:badexp', 'v', unit, n), invalid);
    }
    await rejectsWith(r.call('SET', 'set:badexp', 'v', 'EX', 'abc'), NOT_INTEGER);
    await rejectsWith(r.call('SET', 'set:badexp', 'v', 'EX', '1.5'), NOT_INTEGER);
    await rejectsWith(r.call('SET', 'set:badexp', 'v', 'EX', '99999999999999999999'), NOT_INTEGER);
    assert.equal(await r.exists('set:badexp'), 0);
  });

  test('SET, EXPIRE with an integer that fits int64 but overflows as a deadline answer "invalid expire time"', async () => {
    // Redis parses the number as int64 first, then finds the deadline out of range.
    await rejectsWith(
      r.call('SET', 'set:bigexp', 'v', 'EX', '9999999999999999'),
      "ERR invalid expire time in 'set' command",
    );
    await r.set('set:bigexp', 'v');
    await rejectsWith(
      r.call('EXPIRE', 'set:bigexp', '9223372036854775'),
      "ERR invalid expire time in 'expire' command",
    );
    await rejectsWith(
      r.call('PEXPIRE', 'set:bigexp', '9223372036854775807'),
      "ERR invalid expire time in 'pexpire' command",
    );
  });

  test('SETEX and PSETEX set a value with a time to live; zero, negative and text are refused', async () => {
    assert.equal(await r.setex('setex:k', 100, 'v'), 'OK');
    assert.equal(await r.get('setex:k'), 'v');
    assertTtlNear(await r.ttl('setex:k'), 100);
    assert.equal(await r.psetex('setex:p', 5000, 'v'), 'OK');
    assertPttlNear(await r.pttl('setex:p'), 5000);
    await r.del('setex:p'); // no key expires under DBSIZE's count later
    await rejectsWith(r.call('SETEX', 'setex:bad', '0', 'v'), "ERR invalid expire time in 'setex' command");
    await rejectsWith(r.call('SETEX', 'setex:bad', '-5', 'v'), "ERR invalid expire time in 'setex' command");
    await rejectsWith(r.call('SETEX', 'setex:bad', 'abc', 'v'), NOT_INTEGER);
    await rejectsWith(r.call('PSETEX', 'setex:bad', '0', 'v'), "ERR invalid expire time in 'psetex' command");
    await rejectsWith(r.call('SETEX', 'setex:bad', '10'), arity('setex'));
    assert.equal(await r.exists('setex:bad'), 0);
  });

  test('GETSET sets the value, answers the old one (null when missing) and drops the deadline', async () => {
    assert.equal(await r.getset('getset:k', 'one'), null);
    await r.expire('getset:k', 100);
    assert.equal(await r.getset('getset:k', 'two'), 'one');
    assert.equal(await r.get('getset:k'), 'two');
    assert.equal(await r.ttl('getset:k'), -1);
    await rejectsWith(r.call('GETSET', 'getset:k'), arity('getset'));
  });

  test('SETNX answers 1 when it sets and 0 when the key exists', async () => {
    assert.equal(await r.setnx('setnx:k', 'a'), 1);
    assert.equal(await r.setnx('setnx:k', 'b'), 0);
    assert.equal(await r.get('setnx:k'), 'a');
  });
});

describe('GETDEL and GETEX', () => {
  test('GETDEL returns the value and deletes the key; on a missing key it answers null', async () => {
    await r.set('getdel:k', 'v');
    assert.equal(await r.getdel('getdel:k'), 'v');
    assert.equal(await r.get('getdel:k'), null);
    assert.equal(await r.exists('getdel:k'), 0);
    assert.equal(await r.getdel('getdel:k'), null, 'a second GETDEL finds nothing');
    assert.equal(await r.getdel('getdel:never'), null);
  });

  test('GETEX without options returns the value and keeps its time to live', async () => {
    assert.equal(await r.getex('getex:missing'), null);
    await r.set('getex:k', 'v', 'EX', 100);
    assert.equal(await r.getex('getex:k'), 'v');
    assertTtlNear(await r.ttl('getex:k'), 100);
  });

  test('GETEX EX / PX / EXAT / PXAT set the deadline, PERSIST removes it', async () => {
    await r.set('getex:opts', 'v');
    assert.equal(await r.call('GETEX', 'getex:opts', 'EX', '100'), 'v');
    assertTtlNear(await r.ttl('getex:opts'), 100);
    assert.equal(await r.call('GETEX', 'getex:opts', 'PX', '50000'), 'v');
    assertPttlNear(await r.pttl('getex:opts'), 50_000);
    assert.equal(await r.call('GETEX', 'getex:opts', 'EXAT', '4102444800'), 'v');
    assert.equal(await r.call('EXPIRETIME', 'getex:opts'), 4102444800);
    assert.equal(await r.call('GETEX', 'getex:opts', 'PXAT', '4102444800123'), 'v');
    assert.equal(await r.call('PEXPIRETIME', 'getex:opts'), 4102444800123);
    assert.equal(await r.call('GETEX', 'getex:opts', 'PERSIST'), 'v');
    assert.equal(await r.ttl('getex:opts'), -1);
    assert.equal(await r.call('GETEX', 'getex:opts', 'PXAT', '1'), 'v', 'a past deadline still returns');
    assert.equal(await r.exists('getex:opts'), 0, '…and deletes the key');
  });

  test('GETEX with bad options answers Redis errors', async () => {
    await r.set('getex:bad', 'v');
    await rejectsWith(r.call('GETEX', 'getex:bad', 'EX', '0'), "ERR invalid expire time in 'getex' command");
    await rejectsWith(r.call('GETEX', 'getex:bad', 'EX', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('GETEX', 'getex:bad', 'EX', '10', 'PX', '10'), SYNTAX);
    await rejectsWith(r.call('GETEX', 'getex:bad', 'PERSIST', 'EX', '10'), SYNTAX);
    await rejectsWith(r.call('GETEX', 'getex:bad', 'BOGUS'), SYNTAX);
    await rejectsWith(r.call('GETEX', 'getex:bad', 'EX'), SYNTAX);
    await rejectsWith(r.call('GETEX'), arity('getex'));
    assert.equal(await r.ttl('getex:bad'), -1);
    // Redis looks the key up before it reads the number: a missing key answers null regardless.
    assert.equal(await r.call('GETEX', 'getex:none', 'EX', '0'), null);
    assert.equal(await r.call('GETEX', 'getex:none', 'PX', 'x'), null);
    await rejectsWith(r.call('GETEX', 'getex:none', 'EX', '10', 'PERSIST'), SYNTAX);
    assert.equal(await r.call('GETEX', 'getex:bad', 'EX', 'x', 'EX', '100'), 'v', 'the last EX counts');
    assertTtlNear(await r.ttl('getex:bad'), 100, 'GETEX EX x EX 100');
  });
});

describe('multi-key string commands', () => {
  test('MSET sets every pair (any slots); MGET answers in order with nulls for missing keys', async () => {
    assert.equal(await r.mset('mset:a', '1', 'mset:b', '2', 'mset:c', '3'), 'OK');
    assert.deepEqual(await r.mget('mset:a', 'mset:missing', 'mset:c', 'mset:b', 'mset:a'), [
      '1',
      null,
      '3',
      '2',
      '1',
    ]);
    await rejectsWith(r.call('MSET', 'mset:a', '1', 'mset:b'), arity('mset'));
    await rejectsWith(r.call('MSET'), arity('mset'));
    await rejectsWith(r.call('MGET'), arity('mget'));
  });

  test('MSETNX sets all keys of one slot only when none exists', async () => {
    assert.equal(await r.msetnx('{msetnx}a', '1', '{msetnx}b', '2'), 1);
    assert.equal(await r.msetnx('{msetnx}a', 'x', '{msetnx}c', 'y'), 0);
    assert.deepEqual(await r.mget('{msetnx}a', '{msetnx}b', '{msetnx}c'), ['1', '2', null]);
    await rejectsWith(r.call('MSETNX', '{msetnx}a'), arity('msetnx'));
  });

  test('MSETNX refuses pairs too large to travel as one operation, and writes nothing', async () => {
    const big = 'x'.repeat(70_000);
    await rejectsWith(
      r.call('MSETNX', '{mx}a', 'v', '{mx}b', big),
      'ERR MSETNX takes at most 65535 bytes of keys and values after its first pair',
    );
    assert.equal(await r.exists('{mx}a', '{mx}b'), 0);
    assert.equal(
      await r.call('MSETNX', '{mx}a', big, '{mx}b', 'v'),
      1,
      'the first value may be as large as any',
    );
    assert.equal(await r.strlen('{mx}a'), 70_000);
  });

  test('MSETNX across hash slots answers CROSSSLOT and writes nothing (Redis Cluster semantics)', async () => {
    await rejectsWith(
      r.msetnx('msetnx:x', '1', 'msetnx:y', '2'),
      "CROSSSLOT Keys in request don't hash to the same slot",
    );
    assert.equal(await r.exists('msetnx:x', 'msetnx:y'), 0);
  });

  test('DEL and UNLINK count the keys that existed, each key once', async () => {
    await r.mset('del:a', '1', 'del:b', '2', 'del:c', '3');
    assert.equal(await r.del('del:a', 'del:b', 'del:missing'), 2);
    assert.equal(await r.del('del:a'), 0);
    assert.equal(await r.unlink('del:c', 'del:c'), 1);
    assert.equal(await r.exists('del:a', 'del:b', 'del:c'), 0);
    await rejectsWith(r.call('DEL'), arity('del'));
    await rejectsWith(r.call('UNLINK'), arity('unlink'));
  });

  test('RENAME and RENAMENX move the value and its deadline within one hash slot', async () => {
    await r.set('{rn}a', 'value', 'PX', 100_000);
    assert.equal(await r.rename('{rn}a', '{rn}b'), 'OK');
    assert.equal(await r.exists('{rn}a'), 0, 'the old key is gone');
    assert.equal(await r.get('{rn}b'), 'value');
    assertPttlNear(await r.pttl('{rn}b'), 100_000);
    await r.set('{rn}c', 'overwritten', 'EX', 50);
    assert.equal(await r.rename('{rn}b', '{rn}c'), 'OK', 'RENAME overwrites the target');
    assert.equal(await r.get('{rn}c'), 'value');
    assertPttlNear(await r.pttl('{rn}c'), 100_000);
    await r.set('{rn}plain', 'p');
    assert.equal(await r.rename('{rn}plain', '{rn}d'), 'OK');
    assert.equal(await r.pttl('{rn}d'), -1, 'no deadline moves as no deadline');
    assert.equal(await r.rename('{rn}d', '{rn}d'), 'OK', 'renaming a key to itself changes nothing');
    assert.equal(await r.get('{rn}d'), 'p');

    assert.equal(await r.renamenx('{rn}c', '{rn}d'), 0, 'RENAMENX leaves an existing target alone');
    assert.equal(await r.get('{rn}c'), 'value');
    assert.equal(await r.get('{rn}d'), 'p');
    assert.equal(await r.renamenx('{rn}c', '{rn}e'), 1);
    assert.deepEqual(await r.mget('{rn}c', '{rn}e'), [null, 'value']);
    assert.equal(await r.renamenx('{rn}e', '{rn}e'), 0);

    await rejectsWith(r.rename('{rn}missing', '{rn}x'), 'ERR no such key');
    await rejectsWith(r.renamenx('{rn}missing', '{rn}x'), 'ERR no such key');
    await rejectsWith(
      r.rename('{rn}e', 'elsewhere'),
      "CROSSSLOT Keys in request don't hash to the same slot",
    );
    assert.equal(await r.get('{rn}e'), 'value', 'a refused RENAME moves nothing');
    await rejectsWith(r.call('RENAME', '{rn}e'), arity('rename'));
  });

  test('COPY copies the value and its deadline within one hash slot, REPLACE overwriting', async () => {
    await r.set('{cp}a', 'value', 'PX', 100_000);
    assert.equal(await r.copy('{cp}a', '{cp}b'), 1);
    assert.deepEqual(await r.mget('{cp}a', '{cp}b'), ['value', 'value'], 'the source stays');
    assertPttlNear(await r.pttl('{cp}b'), 100_000);
    await r.set('{cp}c', 'other');
    assert.equal(await r.copy('{cp}c', '{cp}b'), 0, 'a live target is kept without REPLACE');
    assert.equal(await r.get('{cp}b'), 'value');
    assert.equal(await r.call('COPY', '{cp}c', '{cp}b', 'REPLACE'), 1);
    assert.equal(await r.get('{cp}b'), 'other');
    assert.equal(await r.pttl('{cp}b'), -1, 'the copy takes the source’s (absent) deadline');
    assert.equal(await r.call('COPY', '{cp}c', '{cp}d', 'DB', '0'), 1);
    assert.equal(await r.copy('{cp}missing', '{cp}e'), 0, 'an absent source copies nothing');
    assert.equal(await r.exists('{cp}e'), 0);
    await rejectsWith(r.copy('{cp}a', '{cp}a'), 'ERR source and destination objects are the same');
    // Checked before the source is looked up, as Redis does.
    await rejectsWith(r.copy('{cp}none', '{cp}none'), 'ERR source and destination objects are the same');
    await rejectsWith(r.call('COPY', '{cp}a', '{cp}f', 'DB', '1'), 'ERR DB index is out of range');
    await rejectsWith(r.call('COPY', '{cp}a', '{cp}f', 'DB', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('COPY', '{cp}a', '{cp}f', 'NOW'), SYNTAX);
    await rejectsWith(r.copy('{cp}a', 'elsewhere'), "CROSSSLOT Keys in request don't hash to the same slot");
    await rejectsWith(r.call('COPY', '{cp}a'), arity('copy'));
  });

  test('EXISTS counts every key named, repeats included', async () => {
    await r.set('exists:a', '1');
    assert.equal(await r.exists('exists:a'), 1);
    assert.equal(await r.exists('exists:missing'), 0);
    assert.equal(await r.exists('exists:a', 'exists:a', 'exists:missing', 'exists:a'), 3);
    await rejectsWith(r.call('EXISTS'), arity('exists'));
    assert.equal(
      await r.call('TOUCH', 'exists:a', 'exists:missing', 'exists:a'),
      2,
      'TOUCH counts as EXISTS',
    );
    await rejectsWith(r.call('TOUCH'), arity('touch'));
  });
});

describe('string contents', () => {
  test('TYPE answers string or none; STRLEN the byte length or 0', async () => {
    await r.set('type:k', 'héllo');
    assert.equal(await r.type('type:k'), 'string');
    assert.equal(await r.type('type:missing'), 'none');
    assert.equal(await r.strlen('type:k'), 6);
    assert.equal(await r.strlen('type:missing'), 0);
  });

  test('APPEND creates or extends a value and answers the new length', async () => {
    assert.equal(await r.append('append:k', 'Hello'), 5);
    assert.equal(await r.append('append:k', ' World'), 11);
    assert.equal(await r.get('append:k'), 'Hello World');
    assert.equal(await r.append('append:k', ''), 11);
  });

  test('GETRANGE takes inclusive offsets, negative from the end, clamped to the value', async () => {
    await r.set('getrange:k', 'Hello,World');
    const cases: Array<[number, number, string]> = [
      [0, 4, 'Hello'],
      [-5, -1, 'World'],
      [0, -1, 'Hello,World'],
      [0, 100, 'Hello,World'],
      [-100, 2, 'Hel'],
      [-1, -5, ''],
      [5, 3, ''],
      [100, 200, ''],
    ];
    for (const [start, end, expected] of cases) {
      assert.equal(await r.getrange('getrange:k', start, end), expected, `GETRANGE ${start} ${end}`);
    }
    assert.equal(await r.getrange('getrange:missing', 0, 10), '');
    assert.equal(await r.call('SUBSTR', 'getrange:k', '0', '1'), 'He');
    await rejectsWith(r.call('GETRANGE', 'getrange:k', 'x', '1'), NOT_INTEGER);
    await rejectsWith(r.call('GETRANGE', 'getrange:k', '0'), arity('getrange'));
  });

  test('GETRANGE with a negative end before the start of the value clamps it to 0, as Redis 7.2 does', async () => {
    // Redis 7.2's getrangeCommand: end = strlen + end, then `if (end < 0) end = 0`, so the first
    // byte is returned (redis/redis#12272 changed this and was reverted).
    await r.set('getrange:neg', 'Hello,World');
    assert.equal(await r.getrange('getrange:neg', -100, -50), 'H');
    assert.equal(await r.getrange('getrange:neg', 0, -100), 'H');
  });

  test('GETRANGE, SETRANGE and SCAN COUNT take any int64, beyond 2^53 too, as Redis does', async () => {
    await r.set('getrange:int64', 'Hello');
    assert.equal(await r.call('GETRANGE', 'getrange:int64', '0', '9223372036854775807'), 'Hello');
    assert.equal(await r.call('GETRANGE', 'getrange:int64', '-9223372036854775808', '-1'), 'Hello');
    await rejectsWith(r.call('SETRANGE', 'getrange:int64', '9007199254740993', 'x'), TOO_LARGE);
    const [, keys] = (await r.call(
      'SCAN',
      '0',
      'MATCH',
      'getrange:int64',
      'COUNT',
      '9223372036854775807',
    )) as [string, string[]];
    assert.ok(Array.isArray(keys));
  });

  test('SETRANGE overwrites at an offset, pads with zero bytes, and answers the new length', async () => {
    await r.set('setrange:k', 'Hello,World');
    assert.equal(await r.setrange('setrange:k', 6, 'Redis'), 11);
    assert.equal(await r.get('setrange:k'), 'Hello,Redis');
    assert.equal(await r.setrange('setrange:pad', 5, 'x'), 6);
    assert.deepEqual(await r.getBuffer('setrange:pad'), Buffer.from([0, 0, 0, 0, 0, 0x78]));
    assert.equal(await r.setrange('setrange:k', 100, ''), 11, 'an empty patch changes nothing');
    assert.equal(await r.strlen('setrange:k'), 11);
    assert.equal(await r.setrange('setrange:empty', 3, ''), 0, 'an empty patch creates no key');
    assert.equal(await r.exists('setrange:empty'), 0);
  });

  test('SETRANGE refuses a negative offset, a non-integer one, and a result over the value limit', async () => {
    await rejectsWith(r.call('SETRANGE', 'setrange:bad', '-1', 'x'), 'ERR offset is out of range');
    await rejectsWith(r.call('SETRANGE', 'setrange:bad', 'x', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('SETRANGE', 'setrange:bad', String(VALUE_BYTES_MAX_DEFAULT), 'x'), TOO_LARGE);
    assert.equal(await r.exists('setrange:bad'), 0);
    // An empty patch writes nothing, so no offset is too large for it: it answers the length.
    assert.equal(await r.call('SETRANGE', 'setrange:bad', String(2 ** 40), ''), 0);
    await r.set('setrange:bad', 'abc');
    assert.equal(await r.call('SETRANGE', 'setrange:bad', String(2 ** 40), ''), 3);
    assert.equal(await r.get('setrange:bad'), 'abc');
  });
});

describe('bits', () => {
  test('SETBIT sets a bit, growing the value with zero bytes, and answers the old bit; GETBIT reads it', async () => {
    assert.equal(await r.setbit('bits:k', 7, 1), 0);
    assert.equal(await r.setbit('bits:k', 7, 1), 1);
    assert.deepEqual(await r.getBuffer('bits:k'), Buffer.from([0x01]));
    assert.equal(await r.setbit('bits:k', 17, 1), 0);
    assert.deepEqual(await r.getBuffer('bits:k'), Buffer.from([0x01, 0x00, 0x40]));
    assert.equal(await r.getbit('bits:k', 17), 1);
    assert.equal(await r.getbit('bits:k', 16), 0);
    assert.equal(await r.getbit('bits:k', 1_000_000), 0, 'past the end');
    assert.equal(await r.getbit('bits:none', 3), 0, 'a missing key');
    await r.set('bits:ttl', 'a', 'EX', 100);
    assert.equal(await r.setbit('bits:ttl', 6, 1), 0);
    assert.equal(await r.get('bits:ttl'), 'c');
    assertTtlNear(await r.ttl('bits:ttl'), 100, 'SETBIT keeps the time to live');
  });

  test('SETBIT and GETBIT refuse bad offsets and bits; a bit past the value limit is too large', async () => {
    const badOffset = 'ERR bit offset is not an integer or out of range';
    await rejectsWith(r.call('SETBIT', 'bits:bad', '-1', '1'), badOffset);
    await rejectsWith(r.call('SETBIT', 'bits:bad', String(2 ** 32), '1'), badOffset);
    await rejectsWith(r.call('GETBIT', 'bits:bad', 'x'), badOffset);
    await rejectsWith(r.call('SETBIT', 'bits:bad', '0', '2'), 'ERR bit is not an integer or out of range');
    await rejectsWith(r.call('SETBIT', 'bits:bad', '0', 'x'), 'ERR bit is not an integer or out of range');
    await rejectsWith(r.call('SETBIT', 'bits:bad', String(VALUE_BYTES_MAX_DEFAULT * 8), '1'), TOO_LARGE);
    assert.equal(await r.exists('bits:bad'), 0);
  });

  test('BITCOUNT counts set bits, whole or in a byte or bit range (Redis documentation examples)', async () => {
    await r.set('bits:foobar', 'foobar');
    assert.equal(await r.bitcount('bits:foobar'), 26);
    assert.equal(await r.bitcount('bits:foobar', 0, 0), 4);
    assert.equal(await r.bitcount('bits:foobar', 1, 1), 6);
    assert.equal(await r.call('BITCOUNT', 'bits:foobar', '1', '1', 'BYTE'), 6);
    assert.equal(await r.call('BITCOUNT', 'bits:foobar', '5', '30', 'BIT'), 17);
    assert.equal(await r.call('BITCOUNT', 'bits:foobar', '-2', '-1'), 7);
    assert.equal(await r.bitcount('bits:none'), 0);
    await rejectsWith(r.call('BITCOUNT', 'bits:foobar', '0'), SYNTAX);
    await rejectsWith(r.call('BITCOUNT', 'bits:foobar', '0', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('BITCOUNT', 'bits:foobar', '0', '1', 'WORD'), SYNTAX);
  });

  test('BITPOS finds the first set or clear bit; a clear bit past the value unless the end is given', async () => {
    await r.set('bits:pos', Buffer.from([0xff, 0xf0, 0x00]));
    assert.equal(await r.bitpos('bits:pos', 0), 12);
    assert.equal(await r.call('BITPOS', 'bits:pos', '1', '2'), -1);
    assert.equal(await r.call('BITPOS', 'bits:pos', '0', '1', '-1'), 12);
    assert.equal(await r.call('BITPOS', 'bits:pos', '1', '7', '15', 'BIT'), 7);
    await r.set('bits:ones', Buffer.from([0xff, 0xff]));
    assert.equal(await r.bitpos('bits:ones', 0), 16, 'the zeros after the value');
    assert.equal(await r.call('BITPOS', 'bits:ones', '0', '0', '-1'), -1, 'not with an end given');
    assert.equal(await r.bitpos('bits:none', 0), 0);
    assert.equal(await r.bitpos('bits:none', 1), -1);
    await rejectsWith(r.call('BITPOS', 'bits:pos', '2'), 'ERR The bit argument must be 1 or 0.');
    await rejectsWith(r.call('BITPOS', 'bits:pos', '1', '0', '1', 'WORD'), SYNTAX);
  });
  test('BITFIELD gets, sets and increments fields with OVERFLOW rules; BITFIELD_RO only gets', async () => {
    assert.deepEqual(await r.call('BITFIELD', 'bf:k', 'INCRBY', 'i5', '100', '1', 'GET', 'u4', '0'), [1, 0]);
    assert.deepEqual(await r.call('BITFIELD', 'bf:k', 'SET', 'i8', '#0', '-2', 'GET', 'u8', '#0'), [0, 254]);
    assert.deepEqual(await r.call('BITFIELD', 'bf:k', 'OVERFLOW', 'FAIL', 'INCRBY', 'u2', '102', '4'), [
      null,
    ]);
    assert.deepEqual(await r.call('BITFIELD', 'bf:k', 'OVERFLOW', 'SAT', 'INCRBY', 'u2', '102', '4'), [3]);
    // Exact 64-bit answers, read off the wire: the old i64 (0xfe00…), then max + 1 wrapped to min.
    const raw = await fx.raw();
    assert.equal(
      await raw.call('BITFIELD', 'bf:k', 'SET', 'i64', '0', '9223372036854775807', 'INCRBY', 'i64', '0', '1'),
      '*2\r\n:-144115188075855872\r\n:-9223372036854775808\r\n',
    );
    assert.deepEqual(await r.call('BITFIELD_RO', 'bf:k', 'GET', 'u8', '#0'), [0x80]);
    assert.deepEqual(await r.call('BITFIELD', 'bf:none'), []);
    await rejectsWith(
      r.call('BITFIELD_RO', 'bf:k', 'SET', 'u8', '0', '1'),
      'ERR BITFIELD_RO only supports the GET subcommand',
    );
    await rejectsWith(
      r.call('BITFIELD', 'bf:k', 'GET', 'u64', '0'),
      'ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.',
    );
    await rejectsWith(
      r.call('BITFIELD', 'bf:k', 'GET', 'u8', '-1'),
      'ERR bit offset is not an integer or out of range',
    );
    await rejectsWith(r.call('BITFIELD', 'bf:k', 'OVERFLOW', 'MAYBE'), 'ERR Invalid OVERFLOW type specified');
    await rejectsWith(r.call('BITFIELD', 'bf:k', 'SET', 'u8', '0', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('BITFIELD', 'bf:k', 'GET', 'u8'), SYNTAX);
  });

  test('BITOP combines values of one hash slot into a key without a deadline; empty results delete it', async () => {
    await r.set('{bo}a', Buffer.from([0xf0, 0x41]));
    await r.set('{bo}b', Buffer.from([0xff]));
    await r.set('{bo}dest', 'old', 'EX', 100);
    assert.equal(await r.bitop('AND', '{bo}dest', '{bo}a', '{bo}b'), 2);
    assert.deepEqual(await r.getBuffer('{bo}dest'), Buffer.from([0xf0, 0x00]));
    assert.equal(await r.ttl('{bo}dest'), -1);
    assert.equal(await r.bitop('OR', '{bo}or', '{bo}a', '{bo}b', '{bo}missing'), 2);
    assert.deepEqual(await r.getBuffer('{bo}or'), Buffer.from([0xff, 0x41]));
    assert.equal(await r.call('BITOP', 'xor', '{bo}xor', '{bo}b', '{bo}b'), 1);
    assert.deepEqual(await r.getBuffer('{bo}xor'), Buffer.from([0x00]));
    assert.equal(await r.bitop('NOT', '{bo}not', '{bo}a'), 2);
    assert.deepEqual(await r.getBuffer('{bo}not'), Buffer.from([0x0f, 0xbe]));
    assert.equal(await r.bitop('OR', '{bo}dest', '{bo}missing'), 0);
    assert.equal(await r.exists('{bo}dest'), 0, 'an empty result deletes the destination');
    await rejectsWith(r.call('BITOP', 'NAND', '{bo}x', '{bo}a'), SYNTAX);
    await rejectsWith(
      r.call('BITOP', 'NOT', '{bo}x', '{bo}a', '{bo}b'),
      'ERR BITOP NOT must be called with a single source key.',
    );
    await rejectsWith(
      r.call('BITOP', 'AND', '{bo}x', 'elsewhere'),
      "CROSSSLOT Keys in request don't hash to the same slot",
    );
    await rejectsWith(r.call('BITOP', 'AND', '{bo}x'), arity('bitop'));
  });
});

describe('HyperLogLog', () => {
  test('PFADD answers 1 when a register changed; PFCOUNT estimates; PFMERGE unions into a key', async () => {
    assert.equal(await r.pfadd('{hll}a', 'x', 'y', 'z'), 1);
    assert.equal(await r.pfadd('{hll}a', 'x'), 0, 'already counted');
    assert.equal(await r.pfcount('{hll}a'), 3);
    assert.equal(await r.pfadd('{hll}b', 'z', 'w'), 1);
    assert.equal(await r.pfcount('{hll}a', '{hll}b'), 4);
    assert.equal(await r.pfmerge('{hll}u', '{hll}a', '{hll}b'), 'OK');
    assert.equal(await r.pfcount('{hll}u'), 4);
    assert.equal(await r.pfcount('{hll}none'), 0);
    assert.equal(await r.pfadd('{hll}empty'), 1, 'PFADD without elements creates the key');
    assert.equal((await r.getBuffer('{hll}a'))?.subarray(0, 4).toString(), 'HYLL', "Redis's own format");
  });

  test('a value that is not a HyperLogLog is WRONGTYPE; keys of two slots are CROSSSLOT', async () => {
    await r.set('{hll}text', 'hello');
    const wrongType = 'WRONGTYPE Key is not a valid HyperLogLog string value.';
    await rejectsWith(r.pfadd('{hll}text', 'x'), wrongType);
    await rejectsWith(r.pfcount('{hll}text'), wrongType);
    await rejectsWith(r.pfmerge('{hll}a', '{hll}text'), wrongType);
    await rejectsWith(
      r.pfcount('{hll}a', 'elsewhere'),
      "CROSSSLOT Keys in request don't hash to the same slot",
    );
  });
});

describe('DUMP and RESTORE', () => {
  test('DUMP writes a payload RESTORE reads back, with a TTL, ABSTTL and REPLACE', async () => {
    await r.set('dump:src', 'hello');
    const payload = await r.dumpBuffer('dump:src');
    assert.deepEqual(
      payload,
      Buffer.from('000568656c6c6f0a006372df766534200a', 'hex'),
      "Redis's bytes for it",
    );
    assert.equal(await r.restore('dump:copy', 0, payload), 'OK');
    assert.equal(await r.get('dump:copy'), 'hello');
    assert.equal(await r.pttl('dump:copy'), -1);
    await rejectsWith(r.restore('dump:copy', 0, payload), 'BUSYKEY Target key name already exists.');
    assert.equal(await r.call('RESTORE', 'dump:copy', '100000', payload, 'REPLACE'), 'OK');
    assertPttlNear(await r.pttl('dump:copy'), 100_000);
    assert.equal(await r.call('RESTORE', 'dump:copy', '1', payload, 'REPLACE', 'ABSTTL'), 'OK');
    assert.equal(await r.exists('dump:copy'), 0, 'a deadline already past leaves no key');
    assert.equal(await r.dumpBuffer('dump:none'), null);
  });

  test('RESTORE refuses a bad checksum, TTL or option; a key that exists is BUSYKEY first', async () => {
    await r.set('dump:src', 'hello');
    const payload = await r.dumpBuffer('dump:src');
    const corrupt = Buffer.from(payload!);
    corrupt[3] ^= 1;
    await rejectsWith(r.restore('dump:new', 0, corrupt), 'ERR DUMP payload version or checksum are wrong');
    await rejectsWith(r.restore('dump:new', -1, payload!), 'ERR Invalid TTL value, must be >= 0');
    await rejectsWith(r.restore('dump:src', -1, payload!), 'BUSYKEY Target key name already exists.');
    await rejectsWith(
      r.call('RESTORE', 'dump:new', '0', payload!, 'FREQ', '256'),
      'ERR Invalid FREQ value, must be >= 0 and <= 255',
    );
    await rejectsWith(r.call('RESTORE', 'dump:new', '0', payload!, 'NOW'), SYNTAX);
    assert.equal(await r.exists('dump:new'), 0);
  });
});

describe('MEMORY', () => {
  test('MEMORY USAGE counts the key and its stored record; null for a missing key', async () => {
    await r.set('mem:k', 'v'.repeat(1000));
    const usage = (await r.call('MEMORY', 'USAGE', 'mem:k')) as number;
    assert.ok(usage > 1000 + 'mem:k'.length && usage < 1100, String(usage));
    assert.equal(await r.call('MEMORY', 'USAGE', 'mem:k', 'SAMPLES', '0'), usage);
    assert.equal(await r.call('MEMORY', 'USAGE', 'mem:none'), null);
    await rejectsWith(r.call('MEMORY', 'USAGE', 'mem:k', 'SAMPLES', '-1'), SYNTAX);
    await rejectsWith(r.call('MEMORY', 'USAGE'), arity('memory|usage'));
    await rejectsWith(r.call('MEMORY', 'STATS'), /^ERR MEMORY STATS is not supported/);
    await rejectsWith(r.call('MEMORY', 'NOPE'), "ERR unknown subcommand 'NOPE'. Try MEMORY HELP.");
  });
});

describe('LCS', () => {
  test('LCS answers the subsequence, its length, or its ranges (Redis documentation example)', async () => {
    await r.mset('{lcs}1', 'ohmytext', '{lcs}2', 'mynewtext');
    assert.equal(await r.call('LCS', '{lcs}1', '{lcs}2'), 'mytext');
    assert.equal(await r.call('LCS', '{lcs}1', '{lcs}2', 'LEN'), 6);
    assert.deepEqual(await r.call('LCS', '{lcs}1', '{lcs}2', 'IDX'), [
      'matches',
      [
        [
          [4, 7],
          [5, 8],
        ],
        [
          [2, 3],
          [0, 1],
        ],
      ],
      'len',
      6,
    ]);
    assert.deepEqual(await r.call('LCS', '{lcs}1', '{lcs}2', 'IDX', 'MINMATCHLEN', '4', 'WITHMATCHLEN'), [
      'matches',
      [[[4, 7], [5, 8], 4]],
      'len',
      6,
    ]);
    assert.equal(await r.call('LCS', '{lcs}1', '{lcs}none'), '', 'a missing key is empty');
  });

  test('LCS refuses bad options, keys of two slots, and tables past the value limit', async () => {
    await rejectsWith(
      r.call('LCS', '{lcs}1', '{lcs}2', 'LEN', 'IDX'),
      'ERR If you want both the length and indexes, please just use IDX.',
    );
    await rejectsWith(r.call('LCS', '{lcs}1', '{lcs}2', 'MINMATCHLEN', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('LCS', '{lcs}1', '{lcs}2', 'MINMATCHLEN'), SYNTAX);
    await rejectsWith(
      r.call('LCS', '{lcs}1', 'elsewhere'),
      "CROSSSLOT Keys in request don't hash to the same slot",
    );
    const side = Math.ceil(Math.sqrt(VALUE_BYTES_MAX_DEFAULT / 4));
    await r.mset('{lcs}big1', 'a'.repeat(side), '{lcs}big2', 'b'.repeat(side));
    await rejectsWith(
      r.call('LCS', '{lcs}big1', '{lcs}big2'),
      'ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len',
    );
  });
});

describe('counters', () => {
  test('INCR, DECR, INCRBY, DECRBY start from 0 and answer the new value', async () => {
    assert.equal(await r.incr('counter:k'), 1);
    assert.equal(await r.incrby('counter:k', 10), 11);
    assert.equal(await r.decr('counter:k'), 10);
    assert.equal(await r.decrby('counter:k', 5), 5);
    assert.equal(await r.decrby('counter:k', -5), 10);
    assert.equal(await r.incrby('counter:k', 0), 10);
    assert.equal(await r.get('counter:k'), '10');
    assert.equal(await r.decr('counter:neg'), -1);
  });

  test('counters refuse values and deltas that are not canonical int64', async () => {
    await r.set('counter:text', 'abc');
    await rejectsWith(r.incr('counter:text'), NOT_INTEGER);
    await r.set('counter:lead', '007');
    await rejectsWith(r.incr('counter:lead'), NOT_INTEGER);
    await r.set('counter:space', ' 1');
    await rejectsWith(r.incr('counter:space'), NOT_INTEGER);
    await r.set('counter:float', '1.5');
    await rejectsWith(r.incr('counter:float'), NOT_INTEGER);
    await rejectsWith(r.call('INCRBY', 'counter:ok', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('INCRBY', 'counter:ok', '1.5'), NOT_INTEGER);
    await rejectsWith(r.call('INCRBY', 'counter:ok', '9223372036854775808'), NOT_INTEGER);
    await rejectsWith(r.call('DECRBY', 'counter:ok', ''), NOT_INTEGER);
    assert.equal(await r.exists('counter:ok'), 0);
    assert.equal(await r.get('counter:text'), 'abc', 'a refused INCR leaves the value');
  });

  test('counters refuse to overflow int64', async () => {
    await r.set('counter:max', '9223372036854775807');
    await rejectsWith(r.incr('counter:max'), 'ERR increment or decrement would overflow');
    await r.set('counter:min', '-9223372036854775808');
    await rejectsWith(r.decr('counter:min'), 'ERR increment or decrement would overflow');
    await rejectsWith(r.decrby('counter:min', 1), 'ERR increment or decrement would overflow');
    await rejectsWith(
      r.call('DECRBY', 'counter:other', '-9223372036854775808'),
      'ERR decrement would overflow',
    );
    const raw = await fx.raw();
    assert.equal(
      await raw.call('INCRBY', 'counter:big', '-9223372036854775808'),
      ':-9223372036854775808\r\n',
    );
    assert.equal(await raw.call('INCRBY', 'counter:big2', '9223372036854775807'), ':9223372036854775807\r\n');
    assert.equal(await r.get('counter:max'), '9223372036854775807');
  });

  test('INCRBYFLOAT adds and answers the sum in plain decimal', async () => {
    await r.set('float:k', '10.5');
    assert.equal(await r.incrbyfloat('float:k', 0.1), '10.6');
    assert.equal(await r.incrbyfloat('float:k', -5), '5.6');
    assert.equal(await r.get('float:k'), '5.6');
    assert.equal(await r.incrbyfloat('float:new', 3), '3');
    assert.equal(await r.call('INCRBYFLOAT', 'float:small', '1e-5'), '0.00001');
    assert.equal(await r.call('INCRBYFLOAT', 'float:large', '1e20'), '100000000000000000000');
    await r.set('float:int', '3');
    assert.equal(await r.call('INCRBYFLOAT', 'float:int', '0'), '3');
  });

  test('INCRBYFLOAT refuses what is not a float and results that are not finite', async () => {
    await r.set('float:text', 'abc');
    await rejectsWith(r.call('INCRBYFLOAT', 'float:text', '1'), 'ERR value is not a valid float');
    await rejectsWith(r.call('INCRBYFLOAT', 'float:ok', 'abc'), 'ERR value is not a valid float');
    await rejectsWith(r.call('INCRBYFLOAT', 'float:ok', 'nan'), 'ERR value is not a valid float');
    await rejectsWith(r.call('INCRBYFLOAT', 'float:ok', ''), 'ERR value is not a valid float');
    await rejectsWith(
      r.call('INCRBYFLOAT', 'float:ok', 'inf'),
      'ERR increment would produce NaN or Infinity',
    );
    // Longer than Redis reads (5 KiB with its NUL), and far past a 16-bit length on the way.
    await rejectsWith(
      r.call('INCRBYFLOAT', 'float:ok', `0.${'1'.repeat(70_000)}`),
      'ERR value is not a valid float',
    );
    assert.equal(await r.exists('float:ok'), 0);
    await rejectsWith(r.call('INCRBYFLOAT', 'float:ok'), arity('incrbyfloat'));
    assert.equal(await r.call('INCRBYFLOAT', 'float:ok', `0.${'1'.repeat(5117)}`), '0.11111111111111111');
  });

  test('INCRBYFLOAT 0.1 then 0.2 answers 0.3, as Redis (long double, %.17Lf) does', async () => {
    await r.incrbyfloat('float:tenths', 0.1);
    assert.equal(await r.incrbyfloat('float:tenths', 0.2), '0.3');
    assert.equal(await r.call('INCRBYFLOAT', 'float:tenths', '-0.3'), '0');
    assert.equal(await r.call('INCRBYFLOAT', 'float:tenths', '1e-18'), '0', 'printed with 17 decimals');
    // 1000.1 needs more than long double's 64 bits: Redis shows the rounding, and so do we.
    assert.equal(await r.call('INCRBYFLOAT', 'float:tenths', '1000.1'), '1000.09999999999999998');
    assert.equal(await r.call('INCRBYFLOAT', 'float:hex', '0x1.8p1'), '3', 'strtold reads hexadecimal');
  });
});

describe('time to live', () => {
  test('SET k v EX 1 then PTTL is in (0, 1000]', async () => {
    await r.set('ttl:one', 'v', 'EX', 1);
    const pttl = await r.pttl('ttl:one');
    assert.ok(pttl > 0 && pttl <= 1000, String(pttl));
    await r.del('ttl:one'); // no key expires under DBSIZE's count later
  });

  test('TTL, PTTL, EXPIRETIME, PEXPIRETIME answer -2 for a missing key and -1 for a persistent one', async () => {
    for (const command of ['TTL', 'PTTL', 'EXPIRETIME', 'PEXPIRETIME']) {
      assert.equal(await r.call(command, 'ttl:missing'), -2, command);
    }
    await r.set('ttl:persistent', 'v');
    for (const command of ['TTL', 'PTTL', 'EXPIRETIME', 'PEXPIRETIME']) {
      assert.equal(await r.call(command, 'ttl:persistent'), -1, command);
    }
  });

  test('EXPIRE family: relative and absolute, seconds and milliseconds', async () => {
    await r.set('ttl:fam', 'v');
    assert.equal(await r.expire('ttl:fam', 100), 1);
    assertTtlNear(await r.ttl('ttl:fam'), 100);
    assert.equal(await r.pexpire('ttl:fam', 5000), 1);
    assertPttlNear(await r.pttl('ttl:fam'), 5000);
    assert.equal(await r.expireat('ttl:fam', 4102444800), 1);
    assert.equal(await r.call('EXPIRETIME', 'ttl:fam'), 4102444800);
    assert.equal(await r.pexpireat('ttl:fam', 4102444800123), 1);
    assert.equal(await r.call('PEXPIRETIME', 'ttl:fam'), 4102444800123);
    assert.equal(await r.call('EXPIRETIME', 'ttl:fam'), 4102444800, 'EXPIRETIME truncates to seconds');
    assert.equal(await r.expire('ttl:nope', 100), 0, 'a missing key answers 0');
    assert.equal(await r.exists('ttl:nope'), 0);
  });

  test('EXPIRE NX / XX / GT / LT on a key with a deadline', async () => {
    await r.set('ttl:cond', 'v');
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '100', 'NX'), 1);
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '200', 'NX'), 0, 'NX: it has one');
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '200', 'XX'), 1, 'XX: it has one');
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '50', 'GT'), 0);
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '300', 'GT'), 1);
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '400', 'LT'), 0);
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '100', 'LT'), 1);
    assertTtlNear(await r.ttl('ttl:cond'), 100);
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '50', 'XX', 'GT'), 0, 'XX GT: not later');
    assert.equal(await r.call('EXPIRE', 'ttl:cond', '1000', 'xx', 'gt'), 1, 'options are case-insensitive');
  });

  test('EXPIRE NX / XX / GT / LT on a key without a deadline (no deadline counts as infinite)', async () => {
    await r.set('ttl:none', 'v');
    assert.equal(await r.call('EXPIRE', 'ttl:none', '100', 'XX'), 0);
    assert.equal(await r.call('EXPIRE', 'ttl:none', '100', 'GT'), 0);
    assert.equal(await r.ttl('ttl:none'), -1);
    assert.equal(await r.call('EXPIRE', 'ttl:none', '100', 'LT'), 1);
    assertTtlNear(await r.ttl('ttl:none'), 100);
    assert.equal(await r.call('EXPIRE', 'ttl:missing2', '100', 'NX'), 0, 'a missing key answers 0');
  });

  test('EXPIRE with incompatible or unknown options, or a bad number, answers Redis errors', async () => {
    await r.set('ttl:opts', 'v');
    const nxError = 'ERR NX and XX, GT or LT options at the same time are not compatible';
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', '100', 'NX', 'XX'), nxError);
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', '100', 'NX', 'GT'), nxError);
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', '100', 'LT', 'NX'), nxError);
    await rejectsWith(
      r.call('EXPIRE', 'ttl:opts', '100', 'GT', 'LT'),
      'ERR GT and LT options at the same time are not compatible',
    );
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', '100', 'FOO'), 'ERR Unsupported option FOO');
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', 'abc'), NOT_INTEGER);
    // Options are read before the number: a bad option wins.
    await rejectsWith(r.call('EXPIRE', 'ttl:opts', 'abc', 'FOO'), 'ERR Unsupported option FOO');
    await rejectsWith(r.call('PEXPIRE', 'ttl:opts', '1.5'), NOT_INTEGER);
    await rejectsWith(r.call('EXPIRE', 'ttl:opts'), arity('expire'));
    assert.equal(await r.ttl('ttl:opts'), -1);
  });

  test('EXPIRE with zero, a negative or a past time deletes the key and answers 1', async () => {
    const cases: Array<[string, string]> = [
      ['EXPIRE', '0'],
      ['EXPIRE', '-1'],
      ['PEXPIRE', '-100'],
      ['EXPIREAT', '1'],
      ['PEXPIREAT', '1000'],
      ['EXPIREAT', '-5'],
    ];
    for (const [command, n] of cases) {
      await r.set('ttl:past', 'v');
      assert.equal(await r.call(command, 'ttl:past', n), 1, `${command} ${n}`);
      assert.equal(await r.exists('ttl:past'), 0, `${command} ${n}`);
      assert.equal(await r.get('ttl:past'), null);
    }
    assert.equal(await r.call('EXPIRE', 'ttl:past', '-1'), 0, 'on a missing key: 0');
  });

  test('a key expires: PEXPIRE of tens of milliseconds, then GET, EXISTS, TTL see nothing', async () => {
    await r.set('ttl:short', 'v');
    assert.equal(await r.pexpire('ttl:short', 30), 1);
    await eventually(async () => (await r.get('ttl:short')) === null, 2000);
    assert.equal(await r.exists('ttl:short'), 0);
    assert.equal(await r.ttl('ttl:short'), -2);
    assert.equal(await r.strlen('ttl:short'), 0);
    assert.equal(await r.incr('ttl:short'), 1, 'INCR on an expired key starts from 0');
    assert.equal(await r.ttl('ttl:short'), -1, '…and the new value has no deadline');
  });

  test('PERSIST removes a deadline (1) and answers 0 when there is none or no key', async () => {
    await r.set('ttl:persist', 'v', 'EX', 100);
    assert.equal(await r.persist('ttl:persist'), 1);
    assert.equal(await r.ttl('ttl:persist'), -1);
    assert.equal(await r.persist('ttl:persist'), 0);
    assert.equal(await r.persist('ttl:persist-missing'), 0);
  });

  test('INCR, INCRBYFLOAT, APPEND and SETRANGE keep the time to live', async () => {
    await r.set('ttl:keep', '5', 'EX', 100);
    assert.equal(await r.incr('ttl:keep'), 6);
    assertTtlNear(await r.ttl('ttl:keep'), 100, 'INCR');
    assert.equal(await r.incrbyfloat('ttl:keep', 1), '7');
    assertTtlNear(await r.ttl('ttl:keep'), 100, 'INCRBYFLOAT');
    assert.equal(await r.append('ttl:keep', '1'), 2);
    assertTtlNear(await r.ttl('ttl:keep'), 100, 'APPEND');
    assert.equal(await r.setrange('ttl:keep', 0, '9'), 2);
    assertTtlNear(await r.ttl('ttl:keep'), 100, 'SETRANGE');
    assert.equal(await r.get('ttl:keep'), '91');
  });
});

describe('keyspace commands', () => {
  test('SCAN iterates every key once over several pages; MATCH filters; COUNT bounds a page', async () => {
    const keys = Array.from({ length: 250 }, (_, i) => `scanall:${i}`);
    await r.mset(...keys.flatMap((k) => [k, 'v']));
    const seen = new Set<string>();
    let cursor = '0';
    let pages = 0;
    do {
      const [next, page] = (await r.call('SCAN', cursor, 'MATCH', 'scanall:*', 'COUNT', '20')) as [
        string,
        string[],
      ];
      for (const key of page) {
        assert.match(key, /^scanall:/);
        seen.add(key);
      }
      cursor = next;
      pages++;
      assert.ok(pages < 1000, 'the iteration ends');
    } while (cursor !== '0');
    assert.deepEqual([...seen].sort(), [...keys].sort());

    const [, small] = (await r.call('SCAN', '0', 'COUNT', '5')) as [string, string[]];
    assert.ok(small.length <= 5, `COUNT 5 gave ${small.length} keys`);

    const all = new Set<string>();
    cursor = '0';
    do {
      const [next, page] = (await r.scan(cursor, 'COUNT', 100)) as [string, string[]];
      for (const key of page) all.add(key);
      cursor = next;
    } while (cursor !== '0');
    for (const key of keys) assert.ok(all.has(key), `SCAN without MATCH returns ${key}`);
  });

  test('SCAN TYPE string returns keys; TYPE list returns none (strings only)', async () => {
    await r.set('scantype:k', 'v');
    const strings: string[] = [];
    let cursor = '0';
    do {
      const [next, page] = (await r.call('SCAN', cursor, 'MATCH', 'scantype:*', 'TYPE', 'string')) as [
        string,
        string[],
      ];
      strings.push(...page);
      cursor = next;
    } while (cursor !== '0');
    assert.deepEqual(strings, ['scantype:k']);
    assert.deepEqual(await r.call('SCAN', '0', 'TYPE', 'list'), ['0', []]);
  });

  test('SCAN with bad options answers Redis errors', async () => {
    await rejectsWith(r.call('SCAN', '0', 'COUNT', '0'), SYNTAX);
    await rejectsWith(r.call('SCAN', '0', 'COUNT', '-1'), SYNTAX);
    await rejectsWith(r.call('SCAN', '0', 'COUNT', 'x'), NOT_INTEGER);
    await rejectsWith(r.call('SCAN', '0', 'MATCH'), SYNTAX);
    await rejectsWith(r.call('SCAN', '0', 'FOO', 'bar'), SYNTAX);
    await rejectsWith(r.call('SCAN', 'abc'), 'ERR invalid cursor');
    await rejectsWith(r.call('SCAN'), arity('scan'));
  });

  test('KEYS returns the keys matching a glob', async () => {
    await r.mset('keys:a1', '1', 'keys:a2', '2', 'keys:b1', '3', 'keys:ab', '4');
    assert.deepEqual(((await r.keys('keys:*')) as string[]).sort(), [
      'keys:a1',
      'keys:a2',
      'keys:ab',
      'keys:b1',
    ]);
    assert.deepEqual(((await r.keys('keys:a?')) as string[]).sort(), ['keys:a1', 'keys:a2', 'keys:ab']);
    assert.deepEqual(((await r.keys('keys:[ab]1')) as string[]).sort(), ['keys:a1', 'keys:b1']);
    assert.deepEqual(await r.keys('keys:zzz*'), []);
    await rejectsWith(r.call('KEYS'), arity('keys'));
  });

  test('DBSIZE counts live keys', async () => {
    const before = await r.dbsize();
    await r.mset('dbsize:1', 'v', 'dbsize:2', 'v', 'dbsize:3', 'v');
    assert.equal(await r.dbsize(), before + 3);
    await r.del('dbsize:1');
    await r.set('dbsize:2', 'v2');
    assert.equal(await r.dbsize(), before + 2);
    await rejectsWith(r.call('DBSIZE', 'x'), arity('dbsize'));
  });
});

describe('server commands', () => {
  test('TIME answers seconds and microseconds of the wall clock', async () => {
    const [seconds, micros] = await r.time();
    assert.ok(Math.abs(Number(seconds) - Date.now() / 1000) < 5);
    assert.ok(Number(micros) >= 0 && Number(micros) < 1_000_000);
    await rejectsWith(r.call('TIME', 'x'), arity('time'));
  });

  test('INFO has the server, clients, memory, persistence, stats, replication and keyspace sections', async () => {
    await r.set('info:k', 'v');
    // INFO's key count may be KEY_COUNT_REUSE_MS old; DBSIZE counts now, and INFO reuses that.
    assert.ok((await r.dbsize()) >= 1);
    const text = await r.info();
    for (const heading of [
      '# Server',
      '# Clients',
      '# Memory',
      '# Persistence',
      '# Stats',
      '# Replication',
      '# Keyspace',
    ]) {
      assert.ok(text.includes(`${heading}\r\n`), heading);
    }
    assert.match(text, /\r\nredis_version:7\.0\.15\r\n/);
    assert.match(text, /\r\nredis_mode:standalone\r\n/);
    assert.match(text, /\r\nconnected_clients:\d+\r\n/);
    assert.match(text, /\r\nrole:master\r\n/);
    assert.match(text, /\r\ndb0:keys=\d+,expires=\d+,avg_ttl=\d+\r\n/);
    assert.match(text, new RegExp(`\\r\\ntcp_port:${fx.port}\\r\\n`));
  });

  test('INFO section returns that section only', async () => {
    const server = await r.info('server');
    assert.ok(server.startsWith('# Server\r\n'));
    assert.ok(!server.includes('# Clients'));
    const two = (await r.call('INFO', 'server', 'clients')) as string;
    assert.ok(two.includes('# Server') && two.includes('# Clients') && !two.includes('# Memory'));
    const tessera = await r.info('tessera');
    assert.match(tessera, /^# Tessera\r\n.*\r\nfragments:16\r\n/s);
    assert.match(tessera, /\r\nstore_commit_failures_in_a_row:0\r\nstore_refusing_writes:0\r\n/);
    assert.match(
      await r.info('persistence'),
      /^# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_last_write_status:ok\r\n$/,
    );
  });

  test('CONFIG GET answers name/value pairs for maxmemory, appendonly and * patterns', async () => {
    assert.deepEqual(await r.config('GET', 'maxmemory'), ['maxmemory', '0']);
    assert.deepEqual(await r.config('GET', 'appendonly'), ['appendonly', 'yes']);
    assert.deepEqual(await r.call('CONFIG', 'GET', 'maxmemory', 'appendonly'), [
      'maxmemory',
      '0',
      'appendonly',
      'yes',
    ]);
    const all = (await r.config('GET', '*')) as string[];
    const settings = new Map<string, string>();
    for (let i = 0; i < all.length; i += 2) settings.set(all[i], all[i + 1]);
    assert.equal(settings.get('port'), String(fx.port));
    assert.equal(settings.get('databases'), '1');
    assert.equal(settings.get('maxmemory-policy'), 'noeviction');
    assert.deepEqual(await r.config('GET', 'no-such-setting'), []);
    const maxes = (await r.config('GET', 'max*')) as string[];
    assert.ok(maxes.includes('maxmemory') && maxes.includes('maxclients'));
  });

  test('CONFIG SET is refused naming why; CONFIG GET without a pattern is an arity error', async () => {
    await rejectsWith(r.call('CONFIG', 'SET', 'maxmemory', '1'), /^ERR CONFIG SET is not supported/);
    await rejectsWith(r.call('CONFIG', 'GET'), arity('config|get'));
    await rejectsWith(r.call('CONFIG'), arity('config'));
    await rejectsWith(r.call('CONFIG', 'RESETSTAT'), /^ERR CONFIG RESETSTAT is not supported: the counters/);
    await rejectsWith(r.call('CONFIG', 'REWRITE'), /^ERR CONFIG REWRITE is not supported/);
    // An unknown subcommand is answered in Redis's words, and HELP lists the known ones.
    await rejectsWith(r.call('CONFIG', 'BOGUS'), /^ERR unknown subcommand 'BOGUS'\. Try CONFIG HELP\.$/);
    const help = (await r.call('CONFIG', 'HELP')) as string[];
    assert.match(help[0], /^CONFIG <subcommand>/);
    assert.ok(help.includes('GET <pattern>') && help.includes('HELP'));
  });

  test('each refused server command says why in its own words', async () => {
    const reasons: Array<[string[], RegExp]> = [
      [['SAVE'], /^ERR SAVE is not supported: persistence is continuous and configured at start/],
      [['BGREWRITEAOF'], /^ERR BGREWRITEAOF is not supported: persistence is continuous/],
      [
        ['REPLICAOF', 'NO', 'ONE'],
        /^ERR REPLICAOF is not supported: nodes replicate to each other by placement/,
      ],
      [
        ['DEBUG', 'SLEEP', '0'],
        /^ERR DEBUG is not supported: it inspects and changes a redis-server's internals/,
      ],
      [['ACL', 'WHOAMI'], /^ERR ACL is not supported: a node has one password/],
      [['MODULE', 'LIST'], /^ERR MODULE is not supported: Tessera loads no modules/],
    ];
    for (const [args, reason] of reasons)
      await rejectsWith(r.call(...(args as [string, ...string[]])), reason);
  });

  test('COMMAND COUNT, LIST, INFO and DOCS describe the command table', async () => {
    const count = (await r.call('COMMAND', 'COUNT')) as number;
    const list = (await r.call('COMMAND', 'LIST')) as string[];
    // COUNT counts commands; LIST also names the subcommands Tessera implements, as Redis 7 does.
    assert.equal(count, list.filter((name) => !name.includes('|')).length);
    for (const name of ['get', 'set', 'scan', 'hello', 'tessera.durability', 'client|list', 'config|get'])
      assert.ok(list.includes(name), name);
    assert.ok(!list.includes('config|set'), 'CONFIG SET is refused, so not listed');
    const [get, missing] = (await r.call('COMMAND', 'INFO', 'get', 'no-such-command')) as unknown[][];
    assert.deepEqual(get.slice(0, 6), ['get', 2, ['readonly', 'fast'], 1, 1, 1]);
    assert.equal(missing, null);
    const [set, mset] = (await r.call('COMMAND', 'INFO', 'SET', 'mset')) as unknown[][];
    assert.equal(set[1], -3);
    assert.ok((set[2] as string[]).includes('write'));
    assert.deepEqual(mset.slice(3, 6), [1, -1, 2]);
    assert.equal(((await r.call('COMMAND')) as unknown[]).length, count);
    // Tessera's own commands are described by the command table alone, and have no documentation.
    const [durability] = (await r.call('COMMAND', 'INFO', 'tessera.durability')) as unknown[][];
    assert.deepEqual(durability, ['tessera.durability', -1, ['fast'], 0, 0, 0, [], [], [], []]);
    // Without names: every documented command, with its subcommands inside it, not beside it.
    const docs = (await r.call('COMMAND', 'DOCS')) as unknown[];
    assert.ok(docs.includes('get') && docs.includes('client'));
    assert.ok(!docs.includes('client|list') && !docs.includes('tessera.durability'));
    const named = (await r.call('COMMAND', 'DOCS', 'get', 'tessera.durability')) as unknown[];
    assert.equal(named.length, 2, 'one name and its documentation');
    const [name, getDocs] = named as [string, unknown[]];
    assert.equal(name, 'get');
    assert.deepEqual(getDocs.slice(0, 4), ['summary', 'Get the value of a key', 'since', '1.0.0']);
    const help = (await r.call('COMMAND', 'HELP')) as string[];
    assert.match(help[0], /^COMMAND <subcommand>/);
    await rejectsWith(r.call('COMMAND', 'FOO'), "ERR unknown subcommand 'FOO'. Try COMMAND HELP.");
  });

  test('CLIENT SETNAME / GETNAME / ID / INFO / LIST / SETINFO', async () => {
    const c = await fx.client({ disableClientInfo: true });
    const other = await fx.client();
    assert.equal(await c.call('CLIENT', 'GETNAME'), null);
    assert.equal(await c.call('CLIENT', 'SETNAME', 'my-conn'), 'OK');
    assert.equal(await c.call('CLIENT', 'GETNAME'), 'my-conn');
    const id = (await c.call('CLIENT', 'ID')) as number;
    assert.ok(Number.isInteger(id) && id > 0);
    assert.notEqual(await other.call('CLIENT', 'ID'), id, 'ids are per connection');
    assert.equal(await c.call('CLIENT', 'SETINFO', 'LIB-NAME', 'mylib'), 'OK');
    assert.equal(await c.call('CLIENT', 'SETINFO', 'lib-ver', '1.2.3'), 'OK');
    const info = (await c.call('CLIENT', 'INFO')) as string;
    assert.ok(info.endsWith('\n'));
    assert.match(info, new RegExp(`^id=${id} addr=127\\.0\\.0\\.1:\\d+ laddr=127\\.0\\.0\\.1:${fx.port} `));
    assert.match(info, / name=my-conn /);
    assert.match(info, / db=0 /);
    assert.match(info, / resp=2 /);
    assert.match(info, / lib-name=mylib lib-ver=1\.2\.3\n$/);
    const list = (await c.call('CLIENT', 'LIST')) as string;
    assert.match(list, new RegExp(`(^|\\n)id=${id} `));
    assert.match(list, new RegExp(`(^|\\n)id=${await other.call('CLIENT', 'ID')} `));
    assert.equal(await c.call('CLIENT', 'SETNAME', ''), 'OK');
    assert.equal(await c.call('CLIENT', 'GETNAME'), null, 'an empty name clears it');
  });

  test('CLIENT LIST shows a client with half a command in its query buffer, and its file descriptor', async () => {
    const half = await fx.raw();
    try {
      const partial = '*2\r\n$3\r\nGET\r\n$10\r\nabc';
      half.send(partial);
      // The half command's bytes stay in the server's query buffer until the rest comes.
      let line: string | undefined;
      await eventually(async () => {
        const list = (await r.call('CLIENT', 'LIST')) as string;
        line = list.split('\n').find((l) => / qbuf=(\d+) /.exec(l)?.[1] === String(partial.length));
        return line !== undefined;
      });
      assert.match(line!, / fd=\d+ /, 'a real file descriptor');
    } finally {
      half.destroy();
    }
  });

  test('CLIENT refuses bad names, attributes and subcommands with Redis errors', async () => {
    await rejectsWith(
      r.call('CLIENT', 'SETNAME', 'a b'),
      'ERR Client names cannot contain spaces, newlines or special characters.',
    );
    await rejectsWith(
      r.call('CLIENT', 'SETNAME', 'a\nb'),
      'ERR Client names cannot contain spaces, newlines or special characters.',
    );
    await rejectsWith(r.call('CLIENT', 'SETNAME'), arity('client|setname'));
    await rejectsWith(r.call('CLIENT', 'SETINFO', 'FOO', '1'), "ERR Unrecognized option 'FOO'");
    await rejectsWith(r.call('CLIENT', 'SETINFO', 'LIB-NAME'), arity('client|setinfo'));
    await rejectsWith(r.call('CLIENT', 'FOO'), "ERR unknown subcommand 'FOO'. Try CLIENT HELP.");
    await rejectsWith(r.call('CLIENT'), arity('client'));
  });

  test('subcommands without arguments refuse extra ones with the arity error, as Redis does', async () => {
    await rejectsWith(r.call('CLIENT', 'ID', 'x'), arity('client|id'));
    await rejectsWith(r.call('CLIENT', 'GETNAME', 'x'), arity('client|getname'));
    await rejectsWith(r.call('CLIENT', 'INFO', 'x'), arity('client|info'));
    await rejectsWith(r.call('COMMAND', 'COUNT', 'x'), arity('command|count'));
  });

  test('TESSERA.DURABILITY reads and sets this connection’s write acknowledgement level', async () => {
    const c = await fx.client();
    const other = await fx.client();
    assert.equal(await c.call('TESSERA.DURABILITY'), 'store', 'the node default');
    for (const level of ['stable', 'memory', 'store']) {
      assert.equal(await c.call('TESSERA.DURABILITY', level), 'OK');
      assert.equal(await c.call('TESSERA.DURABILITY'), level);
      assert.equal(await c.set(`durability:${level}`, 'v'), 'OK', `a write at ${level}`);
      assert.equal(await c.get(`durability:${level}`), 'v');
    }
    await c.call('TESSERA.DURABILITY', 'STABLE');
    assert.equal(await c.call('TESSERA.DURABILITY'), 'stable', 'level names are case-insensitive');
    assert.equal(await other.call('TESSERA.DURABILITY'), 'store', 'per connection');
    await rejectsWith(
      c.call('TESSERA.DURABILITY', 'bogus'),
      'ERR durability must be one of memory, store, stable',
    );
    assert.equal(await c.call('TESSERA.DURABILITY'), 'stable', 'an invalid level changes nothing');
  });
});

describe('errors', () => {
  test('commands Tessera cannot honour answer -ERR … not supported, naming why', async () => {
    const raw = await fx.raw();
    const cases: Array<[string[], RegExp]> = [
      [['MULTI'], /^-ERR MULTI is not supported\b.*transactions/],
      [['EXEC'], /^-ERR EXEC is not supported\b.*transactions/],
      [['EVAL', 'return 1', '0'], /^-ERR EVAL is not supported\b.*scripting/],
      [['BLPOP', 'l', '0'], /^-ERR BLPOP is not supported\b.*blocking/],
      [['LPUSH', 'l', 'a'], /^-ERR LPUSH is not supported\b.*strings only/],
      [['HSET', 'h', 'f', 'v'], /^-ERR HSET is not supported\b.*strings only/],
      [['MOVE', 'a', '1'], /^-ERR MOVE is not supported\b.*one database/],
      [['SWAPDB', '0', '1'], /^-ERR SWAPDB is not supported\b/],
    ];
    for (const [args, expected] of cases) {
      const reply = await raw.call(...args);
      assert.match(reply, expected, args[0]);
      assert.ok(reply.endsWith('\r\n') && !reply.slice(0, -2).includes('\r'), 'one error line');
    }
    assert.equal(await raw.call('PING'), '+PONG\r\n', 'the connection stays usable');
    assert.equal(await r.exists('l', 'h'), 0, 'nothing was written');
  });

  test('an unknown command answers Redis’s text quoting its first arguments', async () => {
    const raw = await fx.raw();
    assert.equal(
      await raw.call('foo', 'bar', 'baz'),
      "-ERR unknown command 'foo', with args beginning with: 'bar' 'baz' \r\n",
    );
    assert.equal(await raw.call('nosuch'), "-ERR unknown command 'nosuch', with args beginning with: \r\n");
    assert.equal(
      await raw.call('foo', 'x'.repeat(300)),
      `-ERR unknown command 'foo', with args beginning with: '${'x'.repeat(128)}' \r\n`,
      'arguments are quoted up to 128 bytes',
    );
    assert.equal(
      await raw.call('foo', 'a\r\nb'),
      "-ERR unknown command 'foo', with args beginning with: 'a  b' \r\n",
      'CR and LF become spaces so the error stays one line',
    );
    await rejectsWith(r.call('NOSUCH', 'a'), "ERR unknown command 'NOSUCH', with args beginning with: 'a' ");
  });

  test('wrong arity answers Redis’s text with the lower-case command name', async () => {
    await rejectsWith(r.call('GET'), arity('get'));
    await rejectsWith(r.call('GET', 'a', 'b'), arity('get'));
    await rejectsWith(r.call('SET', 'k'), arity('set'));
    await rejectsWith(r.call('set', 'k'), arity('set'));
    await rejectsWith(r.call('INCR'), arity('incr'));
    await rejectsWith(r.call('TTL'), arity('ttl'));
    await rejectsWith(r.call('TYPE'), arity('type'));
    await rejectsWith(r.call('STRLEN', 'a', 'b'), arity('strlen'));
    await rejectsWith(r.call('SELECT'), arity('select'));
  });

  test('a key longer than 1024 bytes is refused', async () => {
    await rejectsWith(r.set('k'.repeat(1025), 'v'), 'ERR key is 1025 bytes; the limit is 1024');
    await rejectsWith(r.get('k'.repeat(1025)), 'ERR key is 1025 bytes; the limit is 1024');
    assert.equal(await r.set('k'.repeat(1024), 'v'), 'OK');
    assert.equal(await r.get('k'.repeat(1024)), 'v');
  });
});

describe('binary safety and sizes', () => {
  test('a value of all 256 byte values round-trips, under a key holding every byte value', async () => {
    const value = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const key = Buffer.concat([Buffer.from('bin:'), value]);
    assert.equal(await r.set(key, value), 'OK');
    assert.deepEqual(await r.getBuffer(key), value);
    assert.equal(await r.strlen(key), 256);
    assert.equal(await r.exists(key), 1);
    assert.deepEqual(await r.mgetBuffer(key, 'bin:missing'), [value, null]);
    assert.deepEqual(await r.getrangeBuffer(key, 250, -1), value.subarray(250));
  });

  test('CR LF inside keys and values, and RESP-looking bytes, are plain data', async () => {
    const key = 'bin:\r\nkey\r\n';
    const value = 'line1\r\n$3\r\nfoo\r\n*1\r\n-ERR not an error\r\n';
    assert.equal(await r.set(key, value), 'OK');
    assert.equal(await r.get(key), value);
    assert.equal(await r.get('bin:\r\nkey'), null, 'a different key');
    const raw = await fx.raw();
    assert.equal(await raw.call('GET', key), `$${Buffer.byteLength(value)}\r\n${value}\r\n`);
  });

  test('the empty value is a value; the empty key is a key', async () => {
    assert.equal(await r.set('bin:empty', ''), 'OK');
    assert.equal(await r.get('bin:empty'), '');
    assert.equal(await r.exists('bin:empty'), 1);
    assert.equal(await r.strlen('bin:empty'), 0);
    assert.equal(await r.type('bin:empty'), 'string');
    const raw = await fx.raw();
    assert.equal(await raw.call('GET', 'bin:empty'), '$0\r\n\r\n');
    assert.equal(await r.set('', 'empty key'), 'OK');
    assert.equal(await r.get(''), 'empty key');
    assert.equal(await r.del(''), 1);
  });

  test('a 1 MiB value round-trips', async () => {
    const value = randomBytes(1024 * 1024);
    assert.equal(await r.set('bin:mib', value), 'OK');
    assert.deepEqual(await r.getBuffer('bin:mib'), value);
    assert.equal(await r.strlen('bin:mib'), 1024 * 1024);
  });

  test('a value over the limit is refused with Redis’s error and not stored', async () => {
    const atLimit = Buffer.alloc(VALUE_BYTES_MAX_DEFAULT, 0x61);
    const over = Buffer.alloc(VALUE_BYTES_MAX_DEFAULT + 1, 0x62);
    await r.set('bin:big', 'small');
    await rejectsWith(r.set('bin:big', over), TOO_LARGE);
    assert.equal(await r.get('bin:big'), 'small', 'the old value is kept');
    await rejectsWith(r.setex('bin:big2', 100, over), TOO_LARGE);
    await rejectsWith(r.mset('bin:big3', 'x', 'bin:big4', over), TOO_LARGE);
    assert.equal(await r.exists('bin:big2', 'bin:big3', 'bin:big4'), 0, 'MSET writes none of its pairs');
    assert.equal(await r.set('bin:big', atLimit), 'OK', 'a value of exactly the limit is accepted');
    await rejectsWith(r.append('bin:big', 'x'), TOO_LARGE);
    assert.equal(await r.strlen('bin:big'), VALUE_BYTES_MAX_DEFAULT);
    assert.equal(await r.ping(), 'PONG', 'the connection stays usable');
  });
});
