// Connection-level commands against a Tessera node and, where it is installed, a real redis-server:
// CLIENT KILL, CLIENT REPLY, COMMAND GETKEYS, ROLE and WAIT. Each behaviour is written out as the
// exact bytes a client receives, and both servers must send them (redis-server is the reference the
// expectations were taken from); a list of argument errors and edge cases must get byte-identical
// replies from the two. Without redis-server on PATH only Tessera is checked, unless
// TESSERA_REQUIRE_REDIS_TOOLS=1 (CI) makes that a failure.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Tessera } from '../../src/main/node.js';
import { eventually, sleep, tempDir } from './helpers.js';
import {
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
/** A WAIT timeout long enough to see that the commands after it are held back. */
const WAIT_MS = 300;
/** PINGs per burst of the instantaneous_ops_per_sec test. */
const BURST_COMMANDS = 2000;
/** The rate that test waits for: twice what its INFO polling alone could reach. */
const BURST_RATE_SEEN = 100;

let fixture: RespFixture;
let redisServer: RedisServer | undefined;

before(async () => {
  // INFO starts a new key count whenever asked (the keyspace test needs a stale count).
  fixture = await startResp({ label: 'resp-client', server: { keyCountReuseMs: 0 } });
  if (redisSkip === false) redisServer = await startRedisServer('resp-client-redis');
});

after(async () => {
  await redisServer?.stop();
  await fixture?.stop();
});

/** The servers to hold to the same bytes: Tessera, and redis-server when it is there. */
const servers = () => comparedServers(fixture, redisServer);

/** Reads replies until (and including) `last`; the connection must then have nothing more to say. */
async function repliesUntil(client: RawClient, last: string): Promise<string[]> {
  const replies: string[] = [];
  for (;;) {
    const reply = (await client.readReply()).toString('latin1');
    replies.push(reply);
    if (reply === last) return replies;
  }
}

const bulk = (s: string) => `$${s.length}\r\n${s}\r\n`;

describe('CLIENT REPLY', () => {
  test('OFF drops replies until ON, SKIP drops the next one; deferred replies too', async () => {
    for (const server of servers()) {
      const c = await server.raw();
      const commands = [
        ['SET', 'reply:k', '1'],
        ['CLIENT', 'REPLY', 'OFF'],
        ['SET', 'reply:k', '2'],
        ['GET', 'reply:k'],
        ['INCR', 'reply:k'],
        ['CLIENT', 'REPLY', 'ON'],
        ['GET', 'reply:k'],
        ['CLIENT', 'REPLY', 'SKIP'],
        ['INCR', 'reply:k'],
        ['GET', 'reply:k'],
        // A SKIP skipped by a SKIP still skips the command after it.
        ['CLIENT', 'REPLY', 'SKIP'],
        ['CLIENT', 'REPLY', 'SKIP'],
        ['PING', 'a'],
        ['PING', 'b'],
        ['CLIENT', 'REPLY', 'OFF'],
        ['CLIENT', 'REPLY', 'SKIP'],
        ['CLIENT', 'REPLY', 'ON'],
        ['CLIENT', 'REPLY', 'BAD'],
        ['PING', 'end'],
      ];
      // One write: the server sees them as one pipeline, the reads among them answered by workers.
      c.send(Buffer.concat(commands.map((args) => encodeCommand(args))));
      assert.deepEqual(
        await repliesUntil(c, bulk('end')),
        [
          '+OK\r\n',
          '+OK\r\n',
          bulk('3'),
          bulk('4'),
          bulk('b'),
          '+OK\r\n',
          '-ERR syntax error\r\n',
          bulk('end'),
        ],
        server.name,
      );
    }
  });
});

describe('CLIENT KILL', () => {
  test('by ID and by address closes that connection; SKIPME no closes the caller after its reply', async () => {
    for (const server of servers()) {
      const killer = await server.raw();
      const byId = await server.raw();
      const byAddr = await server.raw();
      const id = Number((await byId.call('CLIENT', 'ID')).slice(1));
      assert.equal(await killer.call('CLIENT', 'KILL', 'ID', String(id)), ':1\r\n', server.name);
      await byId.closedWithin();
      const addr = `${byAddr.socket.localAddress}:${byAddr.socket.localPort}`;
      assert.equal(await killer.call('CLIENT', 'KILL', addr), '+OK\r\n', server.name);
      await byAddr.closedWithin();
      assert.equal(await killer.call('CLIENT', 'KILL', addr), '-ERR No such client\r\n', server.name);
      // The caller itself is skipped unless SKIPME no; then it gets its count and is closed.
      const ownId = (await killer.call('CLIENT', 'ID')).slice(1, -2);
      assert.equal(await killer.call('CLIENT', 'KILL', 'ID', ownId), ':0\r\n', server.name);
      assert.equal(await killer.call('CLIENT', 'KILL', 'ID', ownId, 'SKIPME', 'no'), ':1\r\n', server.name);
      await killer.closedWithin();
    }
  });
});

describe('WAIT', () => {
  test('without replicas: 0 at once for 0 replicas, else after the timeout; later commands wait for it', async () => {
    for (const server of servers()) {
      const c = await server.raw();
      const watcher = await server.raw();
      assert.equal(await c.call('DEL', 'wait:k'), ':0\r\n', server.name);
      assert.equal(await c.call('WAIT', '0', '0'), ':0\r\n', server.name);
      const started = Date.now();
      c.send(
        Buffer.concat([encodeCommand(['WAIT', '1', String(WAIT_MS)]), encodeCommand(['SET', 'wait:k', '1'])]),
      );
      // Once the server holds c in its WAIT, the SET after it has not run yet. INFO and GET go in one
      // write, read at once: the WAIT's timeout cannot release c between the two.
      await eventually(async () => {
        watcher.send(Buffer.concat([encodeCommand(['INFO', 'clients']), encodeCommand(['GET', 'wait:k'])]));
        const clients = (await watcher.readReply()).toString('latin1');
        const value = (await watcher.readReply()).toString('latin1');
        if (!/\r\nblocked_clients:1\r\n/.test(clients)) return false;
        assert.equal(value, '$-1\r\n', `${server.name}: the SET after the WAIT ran`);
        return true;
      });
      assert.equal((await c.readReply()).toString('latin1'), ':0\r\n', server.name);
      assert.ok(Date.now() - started >= WAIT_MS - 20, `${server.name}: WAIT answered before its timeout`);
      assert.equal((await c.readReply()).toString('latin1'), '+OK\r\n', server.name);
      assert.equal(await watcher.call('GET', 'wait:k'), bulk('1'), server.name);

      // Timeout 0 waits for ever: nothing comes back, and the connection can still be killed.
      const stuck = await server.raw();
      stuck.send(Buffer.concat([encodeCommand(['WAIT', '1', '0']), encodeCommand(['PING'])]));
      await eventually(async () => /\r\nblocked_clients:1\r\n/.test(await watcher.call('INFO', 'clients')));
      // Blocked, it stays so past the timeout any other WAIT here had.
      await sleep(WAIT_MS);
      assert.equal(stuck.receivedBytes, 0, `${server.name}: WAIT 1 0 answered`);
      assert.match(await watcher.call('INFO', 'clients'), /\r\nblocked_clients:1\r\n/, server.name);
      assert.match(await watcher.call('CLIENT', 'LIST'), / flags=b /, server.name);
      const stuckId = `${stuck.socket.localAddress}:${stuck.socket.localPort}`;
      assert.equal(await watcher.call('CLIENT', 'KILL', stuckId), '+OK\r\n', server.name);
      await stuck.closedWithin();
    }
  });
});

test('SHUTDOWN of an embedded node is refused: its application closes it', async () => {
  const c = await fixture.raw();
  assert.equal(
    await c.call('SHUTDOWN'),
    '-ERR SHUTDOWN is not supported here: an embedded node is closed by its application\r\n',
  );
  assert.equal(await c.call('PING'), '+PONG\r\n');
});

test('COMMAND GETKEYS names the keys of a command; ROLE answers as a primary', async () => {
  for (const server of servers()) {
    const c = await server.raw();
    const keys = (...names: string[]) => `*${names.length}\r\n${names.map(bulk).join('')}`;
    assert.equal(await c.call('COMMAND', 'GETKEYS', 'SET', 'a', 'b', 'EX', '10'), keys('a'), server.name);
    assert.equal(await c.call('COMMAND', 'GETKEYS', 'mset', 'a', '1', 'b', '2'), keys('a', 'b'), server.name);
    assert.equal(await c.call('COMMAND', 'GETKEYS', 'BITOP', 'AND', 'd', 'x', 'y'), keys('d', 'x', 'y'));
    assert.equal(await c.call('COMMAND', 'GETKEYS', 'MEMORY', 'USAGE', 'k'), keys('k'), server.name);
    assert.equal(await c.call('COMMAND', 'GETKEYS', 'OBJECT', 'ENCODING', 'k'), keys('k'), server.name);
    assert.equal(
      await c.call('COMMAND', 'GETKEYS', 'GET', 'a', 'b'),
      '-ERR Invalid number of arguments specified for command\r\n',
      server.name,
    );
    assert.equal(await c.call('ROLE'), `*3\r\n${bulk('master')}:0\r\n*0\r\n`, server.name);
  }
});

describe('MONITOR', () => {
  test('shows every command run, as Redis writes it: quoted, escaped, passwords redacted, admin commands hidden', async () => {
    for (const server of servers()) {
      const m = await server.raw();
      const o = await server.raw();
      assert.equal(await m.call('MONITOR'), '+OK\r\n', server.name);
      assert.match(await (await server.raw()).call('CLIENT', 'LIST'), / flags=O /, server.name);
      const own = `${o.socket.localAddress}:${o.socket.localPort}`;
      const mine = `${m.socket.localAddress}:${m.socket.localPort}`;
      const commands: Array<Array<string | Buffer>> = [
        ['SET', 'mon:k', 'a"b\\c'],
        ['GET', 'mon:k'],
        ['SET', 'mon:bin', Buffer.from([0x01, 0x0a, 0x09, 0x0d, 0x07, 0x08, 0xff, 0x20, 0x7e])],
        ['ECHO', 'h\u00e9'],
        ['AUTH', 'secret'],
        ['HELLO', '2', 'AUTH', 'default', 'secret'],
        ['CONFIG', 'GET', 'maxmemory'],
        ['client', 'list'],
        ['CLIENT', 'KILL', 'ID', '99999'],
        ['CLIENT', 'ID'],
        ['NO-SUCH-COMMAND'],
        ['GET'],
        ['DBSIZE'],
      ];
      for (const args of commands) await o.call(...args);
      // The monitor's own commands: shown after their reply; keyspace commands refused and not shown.
      m.sendCommand('PING');
      m.sendCommand('GET', 'mon:k');
      m.sendCommand('MONITOR');
      m.sendCommand('RESET');
      m.sendCommand('GET', 'mon:k');
      const lines = (await repliesUntil(m, bulk('a"b\\c'))).map((line) => {
        const match = /^\+(\d+)\.\d{6} \[0 ([^\]]+)\] (.*)\r\n$/.exec(line);
        if (match === null) return line;
        assert.ok(Math.abs(Number(match[1]) - Date.now() / 1000) < 60, `${server.name}: time in ${line}`);
        return `${match[2] === own ? 'other' : match[2] === mine ? 'self' : match[2]}: ${match[3]}`;
      });
      assert.deepEqual(
        lines,
        [
          'other: "SET" "mon:k" "a\\"b\\\\c"',
          'other: "GET" "mon:k"',
          'other: "SET" "mon:bin" "\\x01\\n\\t\\r\\a\\b\\xff ~"',
          'other: "ECHO" "h\\xc3\\xa9"',
          'other: "AUTH" "(redacted)"',
          'other: "HELLO" "2" "AUTH" "(redacted)" "(redacted)"',
          'other: "CLIENT" "ID"',
          'other: "DBSIZE"',
          '+PONG\r\n',
          'self: "PING"',
          "-ERR Replica can't interact with the keyspace\r\n",
          '+RESET\r\n',
          bulk('a"b\\c'),
        ],
        server.name,
      );
    }
  });
});

/** INFO stats fields as numbers. */
async function stats(client: RawClient): Promise<Map<string, number>> {
  const text = await client.call('INFO', 'stats');
  const fields = new Map<string, number>();
  for (const line of text.split('\r\n')) {
    const [name, value] = line.split(':');
    if (value !== undefined) fields.set(name, Number(value));
  }
  return fields;
}

test('INFO stats counts commands run, key hits and misses, error replies and bytes, as Redis does', async () => {
  for (const server of servers()) {
    const c = await server.raw();
    assert.equal(await c.call('SET', 'stats:k', 'v'), '+OK\r\n');
    const before = await stats(c);
    const sequence = [
      ['SET', 'stats:k', 'v'],
      ['GET', 'stats:k'],
      ['GET', 'stats:none'],
      ['MGET', 'stats:k', 'stats:none', 'stats:none'],
      ['EXISTS', 'stats:k', 'stats:none'],
      ['STRLEN', 'stats:none'],
      ['INCR', 'stats:k'],
      ['GET'],
      ['NO-SUCH-COMMAND'],
    ];
    let sent = 0;
    let received = 0;
    for (const args of sequence) {
      const bytes = encodeCommand(args);
      c.send(bytes);
      sent += bytes.length;
      received += (await c.readReply()).length;
    }
    const after = await stats(c);
    const delta = (name: string) => after.get(name)! - before.get(name)!;
    // The first INFO and the seven commands that ran; unknown commands and wrong arity are not counted.
    assert.equal(delta('total_commands_processed'), 8, server.name);
    assert.equal(delta('keyspace_hits'), 3, server.name);
    assert.equal(delta('keyspace_misses'), 5, server.name);
    assert.equal(delta('total_error_replies'), 3, server.name);
    // The first INFO's request and reply are counted too (its reply only once sent).
    assert.ok(delta('total_net_input_bytes') >= sent, server.name);
    assert.ok(delta('total_net_output_bytes') >= received, server.name);
    for (const name of ['instantaneous_ops_per_sec', 'instantaneous_input_kbps', 'instantaneous_output_kbps'])
      assert.ok(after.has(name), `${server.name}: ${name}`);
  }
});

test('instantaneous_ops_per_sec follows a burst of commands', async () => {
  const c = await fixture.raw();
  const burst = Buffer.concat(Array.from({ length: BURST_COMMANDS }, () => encodeCommand(['PING'])));
  const before = await stats(c);
  let bursts = 0;
  // The server samples its command count every 100 ms: burst until a sample shows the bursts. Apart
  // from them this loop sends one INFO per 20 ms at most, so a rate of 100 a second is the PINGs'.
  await eventually(async () => {
    c.send(burst);
    for (let i = 0; i < BURST_COMMANDS; i++)
      assert.equal((await c.readReply()).toString('latin1'), '+PONG\r\n');
    bursts++;
    return (await stats(c)).get('instantaneous_ops_per_sec')! >= BURST_RATE_SEEN;
  });
  // Every PING was run and counted, as was each INFO before the last.
  const after = await stats(c);
  assert.equal(
    after.get('total_commands_processed')! - before.get('total_commands_processed')!,
    bursts * (BURST_COMMANDS + 1) + 1,
  );
});

test('INFO keyspace answers with the last key count instead of waiting for a new one', async () => {
  const a = await fixture.raw();
  const b = await fixture.raw();
  assert.equal(await a.call('SET', 'count:first', 'v'), '+OK\r\n');
  // The first INFO waits for a count; DBSIZE counts now, and INFO reuses that.
  assert.match(await b.call('INFO', 'keyspace'), /# Keyspace/);
  const before = Number((await a.call('DBSIZE')).slice(1));
  const keys = 200_000;
  for (let i = 0; i < keys; i += 1000) {
    const args = ['MSET'];
    for (let j = i; j < i + 1000; j++) args.push(`count:${j}`, 'v');
    assert.equal(await a.call(...args), '+OK\r\n');
  }
  // A DBSIZE count of 200 000 keys takes many worker round trips; INFO answers meanwhile.
  const received = a.receivedBytes;
  a.sendCommand('DBSIZE');
  const info = await b.call('INFO', 'keyspace');
  assert.equal(a.receivedBytes, received, 'INFO answered while the count ran');
  assert.match(info, new RegExp(`db0:keys=${before},`), 'the last count, not a new one');
  assert.equal((await a.readReply(30_000)).toString('latin1'), `:${before + keys}\r\n`);
  assert.match(await b.call('INFO', 'keyspace'), new RegExp(`db0:keys=${before + keys},`));
});

test('INFO keyspace counts the keys with a deadline and their mean time left', async () => {
  const c = await fixture.raw();
  // The test before leaves 200 000 keys, each of which FLUSHALL gives a tombstone: more than a
  // reply's usual wait on a busy machine.
  c.sendCommand('FLUSHALL');
  assert.equal((await c.readReply(30_000)).toString('latin1'), '+OK\r\n');
  assert.equal(await c.call('SET', 'ttl:a', 'v', 'PX', '1000000'), '+OK\r\n');
  assert.equal(await c.call('SET', 'ttl:b', 'v', 'PX', '2000000'), '+OK\r\n');
  assert.equal(await c.call('SET', 'ttl:c', 'v'), '+OK\r\n');
  assert.equal(await c.call('DBSIZE'), ':3\r\n');
  const line = /db0:keys=(\d+),expires=(\d+),avg_ttl=(\d+)\r\n/.exec(await c.call('INFO', 'keyspace'));
  assert.ok(line !== null);
  assert.deepEqual([line[1], line[2]], ['3', '2']);
  const avg = Number(line[3]);
  assert.ok(avg > 1_400_000 && avg <= 1_500_000, `avg_ttl ${avg}`);
});

test('TESSERA.BACKUP writes a backup under --backup-dir and answers its path; without it, refuses', async () => {
  const c = await fixture.raw();
  assert.equal(
    await c.call('TESSERA.BACKUP'),
    '-ERR TESSERA.BACKUP needs a backup directory: start the node with --backup-dir\r\n',
  );
  const backups = await tempDir('resp-backups');
  const server = await startResp({ label: 'resp-backup', server: { backupDir: backups.path } });
  try {
    const r = await server.raw();
    assert.equal(await r.call('SET', 'bk:k', 'v'), '+OK\r\n');
    const reply = await r.call('TESSERA.BACKUP');
    const path = /^\$\d+\r\n(.*)\r\n$/.exec(reply)?.[1];
    assert.ok(path?.startsWith(`${backups.path}/${server.node.nodeId}-`), reply);
    const restored = await Tessera.start({ dataDir: path, workers: 1, fragments: 16 });
    try {
      assert.equal((await restored.get('bk:k'))?.toString(), 'v');
    } finally {
      await restored.close();
    }
  } finally {
    await server.stop();
    await backups.cleanup();
  }
});

// Argument errors and edge cases: replies compared byte for byte with redis-server's.
const EDGE_CASES = [
  'CLIENT KILL',
  'CLIENT KILL 1.2.3.4:5',
  'CLIENT KILL ID',
  'CLIENT KILL ID abc',
  'CLIENT KILL ID 0',
  'CLIENT KILL ID -1',
  'CLIENT KILL ID 99999',
  'CLIENT KILL ID 9223372036854775808',
  'CLIENT KILL ID +5',
  'CLIENT KILL ADDR 1.2.3.4:5',
  'CLIENT KILL LADDR 1.2.3.4:5',
  'CLIENT KILL TYPE foo',
  'CLIENT KILL TYPE master',
  'CLIENT KILL TYPE PubSub',
  'CLIENT KILL USER bob',
  'CLIENT KILL SKIPME maybe',
  'CLIENT KILL MAXAGE 10',
  'CLIENT KILL FOO bar',
  'CLIENT KILL ID 1 ID',
  'CLIENT KILL ID 1 TYPE bad',
  'CLIENT KILL TYPE bad ID x',
  'CLIENT REPLY',
  'CLIENT REPLY FOO',
  'CLIENT REPLY ON x',
  'COMMAND GETKEYS',
  'COMMAND GETKEYS SET',
  'COMMAND GETKEYS SET a',
  'COMMAND GETKEYS PING x',
  'COMMAND GETKEYS DBSIZE x',
  'COMMAND GETKEYS FOO a',
  'COMMAND GETKEYS MSET a 1 b',
  'COMMAND GETKEYS LCS a b',
  'COMMAND GETKEYS GETEX a',
  'COMMAND GETKEYS EXISTS a b c',
  'COMMAND GETKEYS RENAME a b',
  'COMMAND GETKEYS COPY a b REPLACE',
  'COMMAND GETKEYS PFMERGE d a b',
  'COMMAND GETKEYS SCAN 0',
  'COMMAND GETKEYS MSETNX a 1 b 2',
  'COMMAND GETKEYS MEMORY USAGE',
  'COMMAND GETKEYS MEMORY HELP',
  'COMMAND GETKEYS MEMORY USAGE a SAMPLES 5',
  'COMMAND GETKEYS RESTORE a 0 x',
  'COMMAND GETKEYS CLIENT LIST',
  'COMMAND GETKEYS DEL a b',
  'COMMAND GETKEYS BITFIELD a GET u8 0',
  'COMMAND GETKEYS EXPIRE a 10 NX',
  'SHUTDOWN FOO',
  'SHUTDOWN SAVE NOSAVE',
  'SHUTDOWN ABORT',
  'SHUTDOWN abort',
  'SHUTDOWN ABORT NOW',
  'SHUTDOWN NOW ABORT',
  'ROLE x',
  'WAIT 0',
  'WAIT -1 0',
  'WAIT 0 -1',
  'WAIT x 0',
  'WAIT 0 x',
  'WAIT x -1',
  'WAIT 0 99999999999999999999',
];

// OBJECT's answers for strings of every encoding, compared byte for byte with redis-server's.
const OBJECT_CASES = [
  ...[
    ['obj:int', '123'],
    ['obj:zero', '0'],
    ['obj:shared-max', '9999'],
    ['obj:unshared', '10000'],
    ['obj:negative', '-5'],
    ['obj:leading-zero', '0123'],
    ['obj:plus', '+5'],
    ['obj:int64-max', '9223372036854775807'],
    ['obj:int64-over', '9223372036854775808'],
    ['obj:short', 'hello'],
    ['obj:embstr-max', 'e'.repeat(44)],
    ['obj:raw', 'r'.repeat(45)],
  ].flatMap(([key, value]) => [`SET ${key} ${value}`, `OBJECT ENCODING ${key}`, `OBJECT REFCOUNT ${key}`]),
  'OBJECT ENCODING obj:missing',
  'OBJECT REFCOUNT obj:missing',
  'OBJECT FREQ obj:missing',
  'OBJECT IDLETIME obj:missing',
  'OBJECT FREQ obj:int',
  'OBJECT ENCODING',
  'OBJECT encoding obj:int extra',
  'OBJECT NOPE obj:int',
];

test('OBJECT answers as redis-server does for each string encoding', { skip: redisSkip }, async () => {
  assert.deepEqual(await replyDifferences(await fixture.raw(), await redisServer!.raw(), OBJECT_CASES), []);
});

test('OBJECT IDLETIME of a key is refused: no access times are kept', async () => {
  const c = await fixture.raw();
  assert.equal(await c.call('SET', 'obj:idle', 'v'), '+OK\r\n');
  assert.equal(
    await c.call('OBJECT', 'IDLETIME', 'obj:idle'),
    '-ERR OBJECT IDLETIME is not supported: Tessera keeps no access times\r\n',
  );
  assert.match(await c.call('OBJECT', 'HELP'), /^\*\d+\r\n\+OBJECT <subcommand>/);
});

test('argument errors and edge cases get the same replies as from redis-server', {
  skip: redisSkip,
}, async () => {
  assert.deepEqual(await replyDifferences(await fixture.raw(), await redisServer!.raw(), EDGE_CASES), []);
});
