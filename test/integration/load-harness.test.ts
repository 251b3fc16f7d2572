// The load harness (bench/load/): its zipfian generator against the exact distribution, its reply
// parser across every split of a chunk, every workload against a live Tessera node with zero errors
// and a JSON result whose counts add up, the open loop's rate and its coordinated-omission correction
// against a server too slow for the rate, timeouts, and the SVG chart's well-formedness.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type LoadOptions, parseOptions } from '../../bench/load/options.js';
import { Random } from '../../bench/load/random.js';
import { REPLY_ERROR, REPLY_NULL, REPLY_OK, ReplyParser } from '../../bench/load/reply-parser.js';
import { buildReport, type LoadReport, OPEN_LOOP_ACHIEVED_SHARE_MIN } from '../../bench/load/report.js';
import { renderSvg } from '../../bench/load/report-svg.js';
import { runLoad } from '../../bench/load/run.js';
import { WORKLOAD_NAMES } from '../../bench/load/workloads.js';
import { ZipfianGenerator, zeta } from '../../bench/load/zipfian.js';
import { killedAfterTests } from './children.js';
import { tempDir } from './helpers.js';
import { type RespFixture, startResp } from './resp-helpers.js';

const LOAD_MAIN = fileURLToPath(new URL('../../bench/load/main.js', import.meta.url));

describe('zipfian generator', () => {
  for (const n of [1000, 1_000_000]) {
    test(`rank frequencies over 10^6 draws match 1 / (i^θ ζ(n, θ)) within 5 % (n = ${n})`, () => {
      const theta = 0.99;
      const draws = 1_000_000;
      const head = 10;
      const counts = new Float64Array(head);
      const zipf = new ZipfianGenerator(new Random(42), n, theta);
      for (let d = 0; d < draws; d++) {
        const rank = zipf.next();
        assert.ok(rank >= 0 && rank < n);
        if (rank < head) counts[rank]++;
      }
      const z = zeta(n, theta);
      for (let i = 1; i <= head; i++) {
        const expected = 1 / (i ** theta * z);
        const observed = counts[i - 1] / draws;
        const error = Math.abs(observed - expected) / expected;
        assert.ok(
          error < 0.05,
          `rank ${i}: observed ${observed.toFixed(5)}, expected ${expected.toFixed(5)}`,
        );
      }
    });
  }

  test('is a pure function of its seed, and follows a resized domain', () => {
    const a = new ZipfianGenerator(new Random(7), 500);
    const b = new ZipfianGenerator(new Random(7), 500);
    for (let i = 0; i < 1000; i++) assert.equal(a.next(), b.next());
    a.resize(1);
    for (let i = 0; i < 100; i++) assert.equal(a.next(), 0);
    a.resize(3);
    const seen = new Set<number>();
    for (let i = 0; i < 1000; i++) seen.add(a.next());
    assert.deepEqual([...seen].sort(), [0, 1, 2]);
  });
});

test('the reply parser reads the same replies whatever the chunk boundaries', () => {
  const replies: Array<[string, number, number, string]> = [
    ['+OK\r\n', REPLY_OK, 0, ''],
    ['-ERR wrong number of arguments\r\n', REPLY_ERROR, 0, 'ERR wrong number of arguments'],
    [':-42\r\n', REPLY_OK, 0, ''],
    ['$5\r\nhe\r\nl\r\n', REPLY_OK, 0, ''],
    ['$-1\r\n', REPLY_NULL, 0, ''],
    ['*3\r\n$1\r\na\r\n$-1\r\n$0\r\n\r\n', REPLY_OK, 1, ''],
    ['*-1\r\n', REPLY_NULL, 0, ''],
    ['*0\r\n', REPLY_OK, 0, ''],
    ['*2\r\n*2\r\n:1\r\n$-1\r\n*1\r\n-WRONGTYPE nested\r\n', REPLY_ERROR, 1, 'WRONGTYPE nested'],
    ['%1\r\n+k\r\n_\r\n', REPLY_OK, 1, ''],
    ['|1\r\n+a\r\n+b\r\n:7\r\n', REPLY_OK, 0, ''],
  ];
  const stream = Buffer.from(replies.map((r) => r[0]).join(''), 'latin1');
  for (let split = 1; split <= stream.length; split++) {
    const parser = new ReplyParser();
    const got: Array<[number, number, string]> = [];
    for (let from = 0; from < stream.length; from += split) {
      const chunk = stream.subarray(from, Math.min(from + split, stream.length));
      let at = 0;
      while ((at = parser.next(chunk, at)) !== -1) {
        got.push([parser.status, parser.nulls, parser.status === REPLY_ERROR ? parser.errorText() : '']);
      }
    }
    assert.deepEqual(
      got,
      replies.map(([, status, nulls, text]) => [status, nulls, text]),
      `chunks of ${split} bytes`,
    );
  }
});

describe('against a Tessera node', () => {
  let fx: RespFixture;

  before(async () => {
    fx = await startResp({ label: 'load-harness' });
  });

  after(async () => {
    await fx.stop();
  });

  for (const workload of WORKLOAD_NAMES) {
    test(`workload ${workload}: 3000 operations, zero errors, a JSON result whose counts add up`, async () => {
      const options = quiet(
        fx.port,
        `--workload ${workload} --ops 3000 --keys 2000 --connections 8 --pipeline 4`,
        '--load',
        '--key-prefix',
        `lh-${workload}:`,
      );
      const result = await runLoad(options);
      const dir = await tempDir('load-json');
      let report: LoadReport;
      try {
        const file = join(dir.path, 'result.json');
        await writeFile(file, JSON.stringify(buildReport(result)));
        report = JSON.parse(await readFile(file, 'utf8')) as LoadReport;
      } finally {
        await dir.cleanup();
      }
      checkShape(report);
      assert.equal(report.totals.errors, 0, JSON.stringify(report.errors));
      assert.equal(report.totals.ops, 3000);
      assert.equal(report.preload?.totals.ops, 2000);
      assert.equal(report.totals.misses, 0, 'every key read was loaded or acknowledged');
      assert.deepEqual(Object.keys(report.ops).sort(), Object.keys(report.workload.mix).sort());
      if ('insert' in report.ops) assert.equal(result.keysAfter, 2000 + report.ops.insert.count);
    });
  }

  test('the SVG chart is well-formed XML with both charts', async () => {
    const options = quiet(fx.port, '--workload f --ops 2000 --keys 1000');
    const svg = renderSvg(buildReport(await runLoad(options)));
    assertWellFormed(svg);
    assert.match(
      svg,
      /^<\?xml version="1.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/,
    );
    assert.match(svg, /<title>tessera-load: workload f, zipfian, 50 conns × pipeline 1, closed loop, /);
    for (const op of ['read', 'rmw', 'all']) assert.match(svg, new RegExp(`<polyline data-op="${op}" `));
    assert.match(svg, /<polyline data-series="ops" /);
    assert.doesNotMatch(svg, /data-series="errors"/, 'no error line without errors');
    assert.match(svg, />percentile \(log scale of 1\/\(1-p\)\)</);
    for (const tick of ['0%', '90%', '99%', '99.9%', '99.99%', '99.999%'])
      assert.match(svg, new RegExp(`>${tick}<`));
    assert.match(svg, />throughput \(ops\/s\)</);
  });

  test('the open loop keeps --rate 2000 for 2 s within 10 %', async () => {
    const options = quiet(fx.port, '--workload b --rate 2000 --duration 2s --keys 2000 --connections 8');
    const r = buildReport(await runLoad(options));
    checkShape(r);
    assert.equal(r.mode, 'open');
    assert.ok(r.openLoop);
    assert.equal(r.openLoop.intendedOps, 4000);
    // Sending stops at the deadline: an operation due in its last moments may find all 8 slots busy.
    assert.ok(r.openLoop.sentOps <= 4000 && r.openLoop.sentOps >= 3600, `${r.openLoop.sentOps} sent`);
    // The report's verdict follows from its own numbers (a last operation left unsent counts).
    assert.equal(
      r.openLoop.fellShort,
      r.openLoop.sentOps < 4000 || r.openLoop.achievedRate < OPEN_LOOP_ACHIEVED_SHARE_MIN * 2000,
    );
    assert.ok(Math.abs(r.openLoop.achievedRate - 2000) <= 200, `achieved ${r.openLoop.achievedRate} ops/s`);
    assert.ok(Math.abs(r.series.ops[0] - 2000) <= 200, `first second: ${r.series.ops[0]} ops`);
  });

  test('the CLI: exit 1 and a FAILED line when operations fail, exit 0 and files otherwise', async () => {
    const secured = await startResp({ label: 'load-harness-auth', password: 'sesame' });
    const dir = await tempDir('load-cli');
    try {
      const args = [
        '--port',
        String(secured.port),
        '--workload',
        'set',
        '--ops',
        '200',
        '--connections',
        '2',
      ];
      const failed = await runCli([...args, '--quiet']);
      assert.equal(failed.code, 1);
      assert.equal(lastLine(failed.stdout), 'FAILED: 200 errors (NOAUTH ×200)');
      const json = join(dir.path, 'out.json');
      const svg = join(dir.path, 'out.svg');
      const ok = await runCli([...args, '--password', 'sesame', '--json', json, '--svg', svg]);
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(lastLine(ok.stdout), 'errors: 0');
      assert.match(
        ok.stdout,
        /^op +ops +ops\/s +p50 ms +p90 ms +p99 ms +p99\.9 ms +max ms +errors +misses$/m,
      );
      assert.equal(ok.stderr, '', 'no progress line when stderr is not a terminal');
      checkShape(JSON.parse(await readFile(json, 'utf8')) as LoadReport);
      assertWellFormed(await readFile(svg, 'utf8'));
      const usage = await runCli(['--pipeline', '0']);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /--pipeline must be an integer from 1 to 1024/);
      const help = await runCli(['--help']);
      assert.equal(help.code, 0);
      for (const flag of HELP_FLAGS)
        assert.match(help.stdout, new RegExp(`${flag}\\b`), `--help documents ${flag}`);
    } finally {
      await dir.cleanup();
      await secured.stop();
    }
  });
});

const HELP_FLAGS = [
  '--host',
  '--port',
  '--password',
  '--workload',
  '--distribution',
  '--keys',
  '--value-bytes',
  '--connections',
  '--pipeline',
  '--duration',
  '--ops',
  '--rate',
  '--load',
  '--seed',
  '--json',
  '--svg',
  '--quiet',
];

describe('against a slow or silent server', () => {
  let server: Server;
  let port: number;
  /** Per connection: answer each request with +OK after `delayMs`, or never when delayMs < 0. */
  let delayMs = 20;
  const sockets = new Set<Socket>();

  before(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {});
      // The harness sends one request per chunk with --pipeline 1: answer chunk by chunk, in order.
      let chain = Promise.resolve();
      socket.on('data', () => {
        if (delayMs < 0) return;
        chain = chain.then(() => new Promise((resolve) => setTimeout(resolve, delayMs)));
        chain.then(() => socket.writable && socket.write('+OK\r\n'));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  test('the open loop counts queueing from the intended send time and says the rate fell short', async () => {
    delayMs = 20; // at most ~50 ops/s on one connection
    const options = quiet(port, '--workload set --rate 500 --duration 1s --connections 1 --pipeline 1');
    const r = buildReport(await runLoad(options));
    assert.ok(r.openLoop);
    assert.equal(r.totals.errors, 0);
    assert.equal(r.openLoop.fellShort, true);
    assert.equal(r.openLoop.intendedOps, 500);
    assert.ok(r.openLoop.sentOps < 100, `${r.openLoop.sentOps} sent`);
    // The service time runs from the actual send: the server's hold (half of it at least, for a timer
    // that fires early), without the queueing before the send.
    const { serviceUs } = r.openLoop;
    assert.ok(serviceUs.p50 >= (delayMs * 1000) / 2, `service p50 ${serviceUs.p50} µs covers the hold`);
    assert.ok(serviceUs.p50 < r.all.latencyUs.p50, `service p50 ${serviceUs.p50} µs leaves the queueing out`);
    assert.ok(r.all.latencyUs.p50 > 200_000, `latency p50 ${r.all.latencyUs.p50} µs includes the queueing`);
  });

  test('requests unanswered past --timeout fail as timeouts', async () => {
    delayMs = -1;
    const options = quiet(port, '--workload get --ops 4 --timeout 300ms --connections 2 --pipeline 2');
    const r = buildReport(await runLoad(options));
    assert.equal(r.totals.ops, 0);
    assert.equal(r.totals.failedOps, 4);
    assert.deepEqual(Object.keys(r.errors), ['timeout']);
    assert.equal(r.errors.timeout.count, 4);
  });

  test('an unreachable server rejects the run', async () => {
    const options = quiet(1, '--ops 1');
    await assert.rejects(runLoad(options), /cannot connect to 127\.0\.0\.1:1: ECONNREFUSED/);
  });
});

describe('--cluster, against a node with worker ports', () => {
  let fx: RespFixture;

  before(async () => {
    fx = await startResp({ label: 'load-harness-cluster', server: { workerPorts: { base: 0 } } });
  });

  after(async () => {
    await fx.stop();
  });

  test('every key goes to the worker port CLUSTER SLOTS names: no -MOVED, no miss, every count adds up', async () => {
    for (const workload of ['a', 'f']) {
      const options = quiet(
        fx.port,
        `--cluster --workload ${workload} --ops 3000 --keys 2000 --connections 8 --pipeline 4`,
        '--load',
        '--key-prefix',
        `lhc-${workload}:`,
      );
      const report = buildReport(await runLoad(options));
      checkShape(report);
      assert.equal(report.totals.errors, 0, JSON.stringify(report.errors));
      assert.equal(report.totals.ops, 3000);
      assert.equal(report.preload?.totals.ops, 2000);
      assert.equal(report.totals.misses, 0, 'every key read was loaded through its own port');
    }
    // The worker ports served them: the main thread ran only the harness's CLUSTER SLOTS.
    assert.ok(
      fx.server.stats.commandsProcessed < 10,
      `${fx.server.stats.commandsProcessed} on the main port`,
    );
    const health = await fx.node.health();
    const writesOf = [0, 0];
    for (const f of health.fragments) writesOf[fx.node.dispatcher.workerLinkOf(f.fragment).index] += f.writes;
    assert.ok(
      writesOf.every((n) => n > 0),
      `writes per worker: ${writesOf}`,
    );
  });

  test('workloads that insert or scan are refused with --cluster', () => {
    for (const workload of ['d', 'e'])
      assert.throws(
        () => parseOptions(['--cluster', '--workload', workload]),
        new RegExp(`--cluster does not take workload ${workload}`),
      );
  });
});

/** Options for a quiet run against `port`: `flags` split at spaces, then `more` as they are. */
function quiet(port: number, flags: string, ...more: string[]): LoadOptions {
  const options = parseOptions(['--port', String(port), '--quiet', ...flags.split(' '), ...more]);
  assert.ok(options, 'not --help');
  return options;
}

/** The JSON result's shape, and that its counts add up. */
function checkShape(r: LoadReport): void {
  assert.equal(r.tool, 'tessera-load');
  assert.equal(r.version, 1);
  assert.ok(!Number.isNaN(Date.parse(r.startedAt)));
  for (const key of ['host', 'port', 'workload', 'distribution', 'keys', 'connections', 'pipeline', 'seed']) {
    assert.ok(key in r.config, `config.${key}`);
  }
  const ops = Object.values(r.ops);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  assert.equal(sum(ops.map((o) => o.count)), r.totals.ops);
  assert.equal(sum(ops.map((o) => o.errors)), r.totals.failedOps);
  assert.equal(sum(ops.map((o) => o.misses)), r.totals.misses);
  assert.equal(r.all.count, r.totals.ops);
  assert.equal(sum(r.series.ops), r.totals.ops);
  assert.equal(sum(r.series.errors), r.totals.errors);
  assert.equal(sum(Object.values(r.errors).map((e) => e.count)), r.totals.errors);
  assert.ok(r.totals.errors >= r.totals.failedOps);
  assert.equal(r.series.intervalMs, 1000);
  assert.equal(r.series.ops.length, r.series.errors.length);
  for (const op of [...ops, r.all]) {
    if (op.count === 0) continue;
    const l = op.latencyUs;
    assert.ok(
      l.min <= l.p50 && l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max,
      JSON.stringify(l),
    );
  }
  for (const points of Object.values(r.curves)) {
    for (let i = 1; i < points.length; i++) assert.ok(points[i].us >= points[i - 1].us);
  }
}

/** Checks that `xml` is well-formed: one root, every tag closed in order, attributes quoted, entities valid. */
function assertWellFormed(xml: string): void {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, '');
  const token = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|([^<]+)|(<)/g;
  const stack: string[] = [];
  let roots = 0;
  for (const m of body.matchAll(token)) {
    const [, closing, name, , selfClosing, text, stray] = m;
    assert.equal(stray, undefined, `a stray '<' at ${m.index}: ${body.slice(m.index, m.index + 40)}`);
    if (text !== undefined) {
      assert.ok(stack.length > 0 || text.trim() === '', 'text outside the root element');
      assert.doesNotMatch(text, /&(?!#\d+;|amp;|lt;|gt;|quot;|apos;)/, 'a bare & in text');
      continue;
    }
    if (closing === '/') assert.equal(stack.pop(), name, `</${name}> closes the open element`);
    else if (selfClosing !== '/') {
      if (stack.length === 0) roots++;
      stack.push(name);
    } else if (stack.length === 0) roots++;
  }
  assert.deepEqual(stack, [], 'every element is closed');
  assert.equal(roots, 1, 'one root element');
}

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = killedAfterTests(
      spawn(process.execPath, [LOAD_MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }),
    );
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function lastLine(text: string): string {
  const lines = text.trimEnd().split('\n');
  return lines[lines.length - 1];
}
