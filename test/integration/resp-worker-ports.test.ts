// The workers' own RESP ports (`workerPorts`): each worker serves the keys of its fragments itself,
// answers a key of another worker `-MOVED` to that worker's port and keys of two workers
// `-CROSSSLOT`, answers keyless commands as the main port does, and is reached by cluster-mode
// clients through the slot map. (The command families' replies are compared with redis-server's
// through a worker port in resp-parity.test.ts.)

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { Cluster as RedisCluster } from 'ioredis';
import { slotOf } from '../../src/core/keyspace.js';
import { eventually } from './helpers.js';
import { onPath, RawClient, type RespFixture, startResp } from './resp-helpers.js';

const PASSWORD = 'worker-ports-secret';
let fixture: RespFixture;
let ports: readonly number[];

before(async () => {
  fixture = await startResp({
    label: 'resp-worker-ports',
    password: PASSWORD,
    server: { workerPorts: { base: 0 } },
  });
  ports = fixture.server.workerPorts!;
  assert.equal(ports.length, 2);
});

after(async () => {
  await fixture?.stop();
});

/** The worker that owns `key`'s fragment. */
function ownerOf(key: string): number {
  const dispatcher = fixture.node.dispatcher;
  return dispatcher.workerLinkOf(dispatcher.keyspace.fragmentOfSlot(slotOf(Buffer.from(key)))).index;
}

/** A key owned by `worker`, from `prefix`-numbered candidates, in a slot not in `avoidSlots`. */
function keyOf(worker: number, prefix: string, avoidSlots: number[] = []): string {
  for (let i = 0; ; i++) {
    const key = `${prefix}${i}`;
    if (ownerOf(key) === worker && !avoidSlots.includes(slotOf(Buffer.from(key)))) return key;
  }
}

async function connect(port: number): Promise<RawClient> {
  const client = await RawClient.connect(port);
  assert.equal(await client.call('AUTH', PASSWORD), '+OK\r\n');
  return client;
}

test('a key of another worker is answered -MOVED to its port, keys of two workers -CROSSSLOT', async () => {
  const w0 = await connect(ports[0]);
  try {
    const other = keyOf(1, 'moved:');
    assert.equal(
      await w0.call('SET', other, 'v'),
      `-MOVED ${slotOf(Buffer.from(other))} 127.0.0.1:${ports[1]}\r\n`,
    );
    assert.equal(
      await w0.call('GET', other),
      `-MOVED ${slotOf(Buffer.from(other))} 127.0.0.1:${ports[1]}\r\n`,
    );
    const mine = keyOf(0, 'mine:');
    assert.equal(
      await w0.call('MSET', mine, '1', other, '2'),
      "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
    );
    assert.equal(
      await w0.call('DEL', other, mine),
      "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
    );
    // Keys of one worker run there, in any slots of its fragments.
    const mineToo = keyOf(0, 'mine:', [slotOf(Buffer.from(mine))]);
    assert.equal(await w0.call('MSET', mine, 'a', mineToo, 'b'), '+OK\r\n');
    assert.equal(await w0.call('MGET', mine, mineToo), '*2\r\n$1\r\na\r\n$1\r\nb\r\n');
    // What a worker port wrote, the main port reads.
    const main = await connect(fixture.port);
    try {
      assert.equal(await main.call('GET', mineToo), '$1\r\nb\r\n');
    } finally {
      main.destroy();
    }
  } finally {
    w0.destroy();
  }
});

test('keyless commands answer on a worker port as on the main port; connection state stays on its own port', async () => {
  const w1 = await RawClient.connect(ports[1]);
  const main = await connect(fixture.port);
  try {
    assert.equal(await w1.call('GET', keyOf(1, 'auth:')), '-NOAUTH Authentication required.\r\n');
    assert.equal(await w1.call('PING'), '-NOAUTH Authentication required.\r\n');
    assert.equal(await w1.call('AUTH', PASSWORD), '+OK\r\n');
    assert.equal(await w1.call('PING'), '+PONG\r\n');
    assert.equal(await w1.call('ECHO', 'hi'), '$2\r\nhi\r\n');
    for (const args of [
      ['COMMAND', 'COUNT'],
      ['CONFIG', 'GET', 'maxmemory*'],
      ['CLUSTER', 'SLOTS'],
      ['CLUSTER', 'INFO'],
    ]) {
      assert.equal(await w1.call(...args), await main.call(...args), args.join(' '));
    }
    const key = keyOf(1, 'keyless:');
    assert.equal(await w1.call('SET', key, 'v'), '+OK\r\n');
    assert.equal(await w1.call('DBSIZE'), await main.call('DBSIZE'));
    assert.match(await w1.call('INFO', 'keyspace'), /db0:keys=[1-9]/);
    // CLUSTER SLOTS names each worker's port for its slots.
    const slots = await w1.call('CLUSTER', 'SLOTS');
    for (const port of ports) assert.ok(slots.includes(`:${port}\r\n`), `${port} in ${slots}`);
    assert.equal(await w1.call('CLIENT', 'SETNAME', 'on-worker'), '+OK\r\n');
    assert.equal(await w1.call('CLIENT', 'GETNAME'), '$9\r\non-worker\r\n');
    assert.equal(await main.call('CLIENT', 'GETNAME'), '$-1\r\n');
    // HELLO switches this connection, on this port, to RESP3.
    assert.match(await w1.call('HELLO', '3'), /^%/);
    assert.equal(await w1.call('GET', keyOf(1, 'absent:')), '_\r\n');
    // WAIT runs on the main thread for this connection: without peers no replica exists.
    assert.equal(await w1.call('WAIT', '0', '0'), ':0\r\n');
    assert.deepEqual(await w1.call('WAITAOF', '1', '0', '0'), '*2\r\n:1\r\n:0\r\n');
  } finally {
    w1.destroy();
    main.destroy();
  }
});

test("INFO counts the worker ports' clients and commands with the main port's", async () => {
  const main = await connect(fixture.port);
  const worker = await connect(ports[1]);
  try {
    const field = async (section: string, name: string) =>
      Number(new RegExp(`${name}:(\\d+)`).exec(await main.call('INFO', section))![1]);
    const before = await field('stats', 'total_commands_processed');
    for (let i = 0; i < 50; i++) assert.equal(await worker.call('PING'), '+PONG\r\n');
    // The worker publishes its counters every RATE_SAMPLE_INTERVAL_MS.
    await eventually(async () => (await field('stats', 'total_commands_processed')) >= before + 50);
    await eventually(async () => (await field('clients', 'connected_clients')) >= 2);
  } finally {
    main.destroy();
    worker.destroy();
  }
});

/** A command's INFO commandstats figures, read through `client` (zeros when it has none yet). */
async function commandStat(
  client: RawClient,
  name: string,
): Promise<{ calls: number; rejected: number; failed: number }> {
  const m = new RegExp(
    `cmdstat_${name}:calls=(\\d+),usec=\\d+,usec_per_call=[\\d.]+,rejected_calls=(\\d+),failed_calls=(\\d+)`,
  ).exec(await client.call('INFO', 'commandstats'));
  return m === null
    ? { calls: 0, rejected: 0, failed: 0 }
    : { calls: Number(m[1]), rejected: Number(m[2]), failed: Number(m[3]) };
}

test("INFO commandstats, latencystats and errorstats add up every port's commands, a handed-over one once", async () => {
  // A node of its own: its figures start at 0, so each is checked exactly.
  const own = await startResp({ label: 'resp-worker-ports-stats', server: { workerPorts: { base: 0 } } });
  const [p0, p1] = own.server.workerPorts!;
  const main = await RawClient.connect(own.port);
  const w0 = await RawClient.connect(p0);
  const w1 = await RawClient.connect(p1);
  try {
    const fragmentWorker = (key: string) =>
      own.node.dispatcher.workerLinkOf(own.node.dispatcher.keyspace.fragmentOfSlot(slotOf(Buffer.from(key))))
        .index;
    const keyFor = (worker: number) => {
      for (let i = 0; ; i++) if (fragmentWorker(`stats:${i}`) === worker) return `stats:${i}`;
    };
    const k0 = keyFor(0);
    const k1 = keyFor(1);
    // KEYS needs the node: the worker port hands it to the main thread, which counts it.
    assert.equal(await w0.call('KEYS', 'nothing:*'), '*0\r\n');
    for (let i = 0; i < 20; i++) {
      assert.equal(await w0.call('APPEND', k0, 'v'), `:${i + 1}\r\n`);
      assert.equal(await w1.call('APPEND', k1, 'v'), `:${i + 1}\r\n`);
    }
    for (let i = 0; i < 5; i++) assert.match(await main.call('APPEND', k0, 'v'), /^:\d+\r\n$/);
    assert.match(await w1.call('INCR', k1), /^-ERR value is not an integer/);
    assert.match(await w0.call('MSET', k0, 'a', k1, 'b'), /^-CROSSSLOT /);
    // Each port sends its figures every PORT_STATS_PUBLISH_INTERVAL_MS, the last command's included.
    // As Redis Cluster's: CROSSSLOT refuses the command before it runs.
    await eventually(async () => (await commandStat(main, 'mset')).rejected === 1);
    await eventually(async () => (await commandStat(main, 'incr')).failed === 1);
    assert.deepEqual(await commandStat(main, 'append'), { calls: 45, rejected: 0, failed: 0 });
    assert.deepEqual(await commandStat(main, 'incr'), { calls: 1, rejected: 0, failed: 1 });
    assert.deepEqual(await commandStat(main, 'keys'), { calls: 1, rejected: 0, failed: 0 }, 'counted once');
    const errorstats = await main.call('INFO', 'errorstats');
    assert.match(errorstats, /errorstat_ERR:count=1\r\n/);
    assert.match(errorstats, /errorstat_CROSSSLOT:count=1\r\n/);
    assert.match(await main.call('INFO', 'latencystats'), /latency_percentiles_usec_append:p50=[\d.]+,p99=/);
    // Through a worker port, INFO (run by the main thread) answers the same sums.
    assert.deepEqual(await commandStat(w1, 'append'), { calls: 45, rejected: 0, failed: 0 });
  } finally {
    main.destroy();
    w0.destroy();
    w1.destroy();
    await own.stop();
  }
});

test('MONITOR through the main port or a worker port shows what every port runs, a handed-over command once', async () => {
  const onMain = await connect(fixture.port);
  const onWorker = await connect(ports[0]);
  const client = await connect(ports[1]);
  const other = await connect(fixture.port);
  try {
    assert.equal(await onMain.call('MONITOR'), '+OK\r\n');
    assert.equal(await onWorker.call('MONITOR'), '+OK\r\n');
    // A monitor runs no keyspace command, on a worker port as on the main port.
    assert.match(await onWorker.call('GET', keyOf(0, 'mon:')), /^-ERR /);
    const key = keyOf(1, 'mon:');
    assert.equal(await client.call('SET', key, 'seen'), '+OK\r\n');
    // DBSIZE is handed to the main thread, which runs it, and shows it, once.
    assert.match(await client.call('DBSIZE'), /^:\d+\r\n$/);
    assert.equal(await other.call('GET', key), '$4\r\nseen\r\n');
    assert.equal(await client.call('ECHO', 'mon-end'), '$7\r\nmon-end\r\n');
    const expected = [`"SET" "${key}" "seen"`, '"DBSIZE"', `"GET" "${key}"`, '"ECHO" "mon-end"'];
    for (const monitor of [onMain, onWorker]) {
      const shown: string[] = [];
      while (shown.at(-1) !== '"ECHO" "mon-end"') {
        const line = (await monitor.readReply()).toString('latin1');
        const match = /^\+\d+\.\d{6} \[0 [^\]]+\] (.*)\r\n$/.exec(line);
        assert.ok(match !== null, `a MONITOR line: ${line}`);
        shown.push(match[1]);
      }
      assert.deepEqual(
        shown.filter((line) => expected.includes(line)),
        expected,
        `each once, in order: ${shown.join(' | ')}`,
      );
    }
  } finally {
    for (const c of [onMain, onWorker, client, other]) c.destroy();
  }
});

test('subscriptions through a worker port answer as on the main port, and get what is published', async () => {
  const onMain = await connect(fixture.port);
  const onWorker = await connect(ports[1]);
  const publisher = await connect(ports[0]);
  try {
    const key = keyOf(1, 'subscribed:');
    for (const protocol of ['2', '3']) {
      // HELLO's reply names each connection's own id: not compared.
      for (const client of [onMain, onWorker]) assert.match(await client.call('HELLO', protocol), /^[*%]/);
      const sequence = [
        // One channel each: a subscription command answers once per channel, RawClient.call reads one.
        ['SUBSCRIBE', 'news'],
        ['SUBSCRIBE', 'sport'],
        ['PSUBSCRIBE', 'n*'],
        ['GET', key],
        ['PING'],
        ['UNSUBSCRIBE', 'sport'],
      ];
      for (const args of sequence) {
        const expected = await onMain.call(...args);
        assert.equal(await onWorker.call(...args), expected, `${args.join(' ')} in RESP${protocol}`);
      }
      // Published on another worker's port: it reaches both clients, each twice (channel, pattern).
      assert.equal(await publisher.call('PUBLISH', 'news', `hello-${protocol}`), ':4\r\n');
      for (let i = 0; i < 2; i++) {
        assert.equal(
          (await onWorker.readReply()).toString('latin1'),
          (await onMain.readReply()).toString('latin1'),
        );
      }
      for (const args of [['UNSUBSCRIBE'], ['PUNSUBSCRIBE'], ['GET', key]]) {
        const expected = await onMain.call(...args);
        assert.equal(await onWorker.call(...args), expected, `${args.join(' ')} in RESP${protocol}`);
      }
    }
    // A client that goes away takes its subscriptions with it.
    assert.equal(await onWorker.call('HELLO', '2').then((r) => r.startsWith('*')), true);
    await onWorker.call('SUBSCRIBE', 'gone');
    assert.equal(await onMain.call('PUBSUB', 'NUMSUB', 'gone'), '*2\r\n$4\r\ngone\r\n:1\r\n');
    onWorker.destroy();
    await eventually(
      async () => (await onMain.call('PUBSUB', 'NUMSUB', 'gone')) === '*2\r\n$4\r\ngone\r\n:0\r\n',
    );
  } finally {
    onMain.destroy();
    onWorker.destroy();
    publisher.destroy();
  }
});

test('a pipeline through a worker port runs in order across commands the main thread runs', async () => {
  const worker = await connect(ports[0]);
  try {
    const [before, after] = [keyOf(0, 'pipeline:'), keyOf(0, 'pipeline-after:')];
    assert.equal(await worker.call('SET', before, 'v'), '+OK\r\n');
    // FLUSHALL runs on the main thread; the SET after it must not run first (and be flushed).
    worker.sendCommand('FLUSHALL');
    worker.sendCommand('SET', after, 'kept');
    worker.sendCommand('GET', after);
    worker.sendCommand('DBSIZE');
    worker.sendCommand('GET', before);
    const replies = [];
    for (let i = 0; i < 5; i++) replies.push((await worker.readReply()).toString('latin1'));
    assert.deepEqual(replies, ['+OK\r\n', '+OK\r\n', '$4\r\nkept\r\n', ':1\r\n', '$-1\r\n']);
  } finally {
    worker.destroy();
  }
});

test('writes through a worker port and the main port keep the order they were made in', async () => {
  const key = keyOf(0, 'order:');
  const worker = await connect(ports[0]);
  const main = await connect(fixture.port);
  try {
    for (let i = 0; i < 200; i++) {
      const [first, second] = i % 2 === 0 ? [worker, main] : [main, worker];
      assert.equal(await first.call('SET', key, `first-${i}`), '+OK\r\n');
      assert.equal(await second.call('SET', key, `second-${i}`), '+OK\r\n');
      const expected = `$${`second-${i}`.length}\r\nsecond-${i}\r\n`;
      assert.equal(await worker.call('GET', key), expected, `round ${i}, read on the worker port`);
      assert.equal(await main.call('GET', key), expected, `round ${i}, read on the main port`);
    }
    const counter = keyOf(0, 'counter:');
    for (let i = 0; i < 100; i++) await (i % 2 === 0 ? worker : main).call('INCR', counter);
    assert.equal(await main.call('GET', counter), '$3\r\n100\r\n');
  } finally {
    worker.destroy();
    main.destroy();
  }
});

test('ioredis Cluster and redis-cli -c reach every key through the worker ports', async (t) => {
  const rc = new RedisCluster([{ host: '127.0.0.1', port: ports[0] }], {
    clusterRetryStrategy: () => null,
    redisOptions: { password: PASSWORD },
  });
  const main = await fixture.client({ password: PASSWORD });
  try {
    for (let i = 0; i < 200; i++) assert.equal(await rc.set(`rc:${i}`, `v${i}`), 'OK');
    for (let i = 0; i < 200; i++) assert.equal(await rc.get(`rc:${i}`), `v${i}`);
    for (let i = 0; i < 200; i++) assert.equal(await main.get(`rc:${i}`), `v${i}`);
    // Every worker's port took some of them.
    const nodes = rc.nodes('master').map((n) => n.options.port);
    assert.deepEqual([...nodes].sort(), [...ports].sort());
  } finally {
    rc.disconnect();
  }
  if (!onPath('redis-cli')) return t.skip('redis-cli is not on PATH');
  const key = keyOf(1, 'cli:');
  const cli = (...args: string[]) =>
    spawnSync('redis-cli', ['-c', '-p', String(ports[0]), '-a', PASSWORD, '--no-auth-warning', ...args], {
      encoding: 'utf8',
    });
  assert.equal(cli('SET', key, 'through-redirect').stdout.trim(), 'OK');
  assert.equal(cli('GET', key).stdout.trim(), 'through-redirect');
});

test('a worker restarted by its supervisor reopens its port and counts on from its published figures', async () => {
  const link = fixture.node.dispatcher.links[1];
  const restartsBefore = link.restarts;
  const main = await connect(fixture.port);
  const before = await connect(ports[1]);
  // STRLEN: a command no other test here sends, so its count is this test's alone.
  try {
    assert.equal(await before.call('STRLEN', keyOf(1, 'restart:')), ':0\r\n');
    await eventually(async () => (await commandStat(main, 'strlen')).calls === 1);
  } finally {
    before.destroy();
  }
  link.crash();
  await eventually(() => link.restarts > restartsBefore && link.state === 'ready', 20_000);
  let client: RawClient | undefined;
  await eventually(async () => {
    try {
      client = await connect(ports[1]);
      return true;
    } catch {
      return false;
    }
  }, 20_000);
  try {
    const key = keyOf(1, 'restart:');
    assert.equal(await client!.call('SET', key, 'after'), '+OK\r\n');
    assert.equal(await client!.call('GET', key), '$5\r\nafter\r\n');
    // The restarted port started from what it had published: INFO's sum goes on, not back.
    assert.equal(await client!.call('STRLEN', key), ':5\r\n');
    await eventually(async () => (await commandStat(main, 'strlen')).calls === 2);
  } finally {
    client!.destroy();
    main.destroy();
  }
});
