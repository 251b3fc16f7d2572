// Redis's own tools against a node started from the command line: redis-cli (plain commands, -x,
// --scan, --bigkeys, --memkeys, INFO, DBSIZE, errors, -a against --requirepass, --pipe mass insertion) and redis-benchmark
// (pipelined and not). The tools are Debian's redis-tools; .ci/run installs them. Without redis-cli on
// PATH the whole file is skipped, unless TESSERA_REQUIRE_REDIS_TOOLS=1 (CI) makes that a failure.

import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { killedAfterTests } from './children.js';
import { tempDir } from './helpers.js';
import { onPath, REQUIRE_REDIS_TOOLS } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
/** Longest any one tool run may take; a hang shows as a failure, not a stuck suite. */
const TOOL_TIMEOUT_MS = 60_000;
const PIPE_COMMANDS = 10_000;

const INSTALL_HINT = 'install redis-tools (apt-get install -y redis-tools)';
const haveCli = onPath('redis-cli');
const haveBenchmark = onPath('redis-benchmark');
const skipCli = haveCli || REQUIRE_REDIS_TOOLS ? false : `redis-cli is not on PATH: ${INSTALL_HINT}`;
const skipBenchmark =
  skipCli !== false
    ? skipCli
    : haveBenchmark || REQUIRE_REDIS_TOOLS
      ? false
      : `redis-benchmark is not on PATH: ${INSTALL_HINT}`;

if (REQUIRE_REDIS_TOOLS) {
  test('redis-cli and redis-benchmark are installed (TESSERA_REQUIRE_REDIS_TOOLS=1)', () => {
    assert.ok(haveCli, `redis-cli is not on PATH: ${INSTALL_HINT}`);
    assert.ok(haveBenchmark, `redis-benchmark is not on PATH: ${INSTALL_HINT}`);
  });
}

/** A node run by the `tessera` command, on a free port. */
interface CliNode {
  port: number;
  child: ChildProcess;
  exited: Promise<number | null>;
  lines: Array<Record<string, unknown>>;
  stop(): Promise<number | null>;
}

async function startCliNode(dataDir: string, extra: string[] = []): Promise<CliNode> {
  const child = killedAfterTests(
    spawn(
      process.execPath,
      [MAIN, '--data-dir', dataDir, '--port', '0', '--workers', '2', '--fragments', '8', ...extra],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    ),
  );
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const lines: Array<Record<string, unknown>> = [];
  // Read every line for as long as the node runs, so its stdout pipe never fills and blocks it.
  const reader = createInterface({ input: child.stdout! });
  const ready = new Promise<number>((resolve, reject) => {
    reader.on('line', (line) => {
      const entry = JSON.parse(line) as Record<string, unknown>;
      lines.push(entry);
      if (entry.msg === 'ready') resolve(entry.port as number);
    });
    reader.on('close', () =>
      reject(new Error(`the node exited before it was ready: ${JSON.stringify(lines)}`)),
    );
  });
  const port = await ready;
  return {
    port,
    child,
    exited,
    lines,
    stop: () => {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

interface ToolRun {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/** Runs a tool to completion; `input` goes to its stdin. */
function run(tool: string, args: readonly string[], input?: Buffer): Promise<ToolRun> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      tool,
      args,
      { encoding: 'buffer', timeout: TOOL_TIMEOUT_MS, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
        if (err?.killed) {
          reject(new Error(`${tool} ${args.join(' ')} timed out or was killed: ${stderr.toString()}`));
          return;
        }
        resolve({ code, stdout, stderr: stderr.toString('utf8') });
      },
    );
    child.stdin!.on('error', () => {}); // a tool that exits early closes its stdin
    child.stdin!.end(input);
  });
}

let dir: Awaited<ReturnType<typeof tempDir>>;
let tessera: CliNode;

/** redis-cli against the node; stdout as text (redis-cli prints raw replies when not on a terminal). */
async function cli(...args: string[]): Promise<string> {
  const r = await run('redis-cli', ['-p', String(tessera.port), ...args]);
  assert.equal(r.code, 0, `redis-cli ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout.toString('utf8');
}

before(async () => {
  if (skipCli !== false) return;
  dir = await tempDir('resp-cli');
  tessera = await startCliNode(dir.path);
});

after(async () => {
  if (tessera !== undefined) assert.equal(await tessera.stop(), 0, 'the node shuts down cleanly');
  await dir?.cleanup();
});

test('redis-cli: PING, SET then GET', { skip: skipCli }, async () => {
  assert.equal(await cli('ping'), 'PONG\n');
  assert.equal(await cli('set', 'cli:greeting', 'hello world'), 'OK\n');
  assert.equal(await cli('get', 'cli:greeting'), 'hello world\n');
  assert.equal(await cli('get', 'cli:missing'), '\n');
  assert.equal(await cli('echo', 'ünïcode ✓'), 'ünïcode ✓\n');
});

test('redis-cli -x: every byte value survives the round trip', { skip: skipCli }, async () => {
  const value = Buffer.alloc(512);
  for (let i = 0; i < value.length; i++) value[i] = (i * 7) & 0xff; // all 256 bytes, NUL and CR LF among them
  const set = await run('redis-cli', ['-p', String(tessera.port), '-x', 'set', 'cli:binary'], value);
  assert.equal(set.stdout.toString(), 'OK\n', set.stderr);
  const got = await run('redis-cli', ['-p', String(tessera.port), 'get', 'cli:binary']);
  assert.ok(
    got.stdout.equals(Buffer.concat([value, Buffer.from('\n')])),
    'the value comes back byte for byte',
  );
  assert.equal(await cli('strlen', 'cli:binary'), `${value.length}\n`);
});

test('redis-cli --scan --pattern visits exactly the matching keys', { skip: skipCli }, async () => {
  const wanted: string[] = [];
  const args = ['mset'];
  for (let i = 0; i < 120; i++) {
    wanted.push(`scan:match:${i}`);
    args.push(`scan:match:${i}`, String(i), `scan:other:${i}`, String(i));
  }
  assert.equal(await cli(...args), 'OK\n');
  const found = (await cli('--scan', '--pattern', 'scan:match:*')).split('\n').filter((l) => l !== '');
  assert.deepEqual([...new Set(found)].sort(), wanted.sort());
  const counted = (await cli('--scan', '--pattern', 'scan:*')).split('\n').filter((l) => l);
  assert.equal(new Set(counted).size, 240);
});

test('redis-cli --bigkeys and --memkeys find the largest string', { skip: skipCli }, async () => {
  assert.equal(await cli('set', 'cli:big', 'x'.repeat(50_000)), 'OK\n');
  assert.match(await cli('--bigkeys'), /Biggest string found '"cli:big"' has 50000 bytes/);
  // MEMORY USAGE counts the key and its stored record: a little more than the value.
  const memory = /Biggest string found '"cli:big"' has (\d+) bytes/.exec(await cli('--memkeys'));
  assert.ok(memory !== null && Number(memory[1]) > 50_000 && Number(memory[1]) < 50_200, String(memory?.[0]));
});

test('redis-cli: INFO and DBSIZE', { skip: skipCli }, async () => {
  const info = await cli('info');
  for (const field of ['# Server', 'redis_version:', 'tessera_version:', 'tcp_port:', '# Keyspace']) {
    assert.ok(info.includes(field), `INFO has ${field}`);
  }
  assert.match(info, new RegExp(`tcp_port:${tessera.port}\\r?\\n`));
  const keyspace = await cli('info', 'keyspace');
  assert.match(keyspace, /^# Keyspace\r?\ndb0:keys=\d+,expires=0,avg_ttl=0/);
  const all = (await cli('--scan')).split('\n').filter((l) => l !== '');
  assert.equal(await cli('dbsize'), `${new Set(all).size}\n`);
});

test('redis-cli: an unknown command gets Redis error text', { skip: skipCli }, async () => {
  // redis-cli prints an error reply and a blank line, and still exits 0 (as against redis-server).
  assert.equal(
    await cli('nosuchcommand', 'a', 'b'),
    "ERR unknown command 'nosuchcommand', with args beginning with: 'a' 'b' \n\n",
  );
  assert.equal(await cli('get'), "ERR wrong number of arguments for 'get' command\n\n");
});

test('redis-cli -a against a node started with --requirepass', { skip: skipCli }, async () => {
  const authDir = await tempDir('resp-cli-auth');
  const guarded = await startCliNode(authDir.path, ['--requirepass', 's3cret pw']);
  try {
    const port = String(guarded.port);
    const open = await run('redis-cli', ['-p', port, 'get', 'k']);
    assert.equal(open.stdout.toString(), 'NOAUTH Authentication required.\n\n');
    const ok = await run('redis-cli', ['-p', port, '--no-auth-warning', '-a', 's3cret pw', 'set', 'k', 'v']);
    assert.equal(ok.stdout.toString(), 'OK\n');
    assert.equal(ok.stderr, '', 'no warning with --no-auth-warning');
    const read = await run('redis-cli', ['-p', port, '--no-auth-warning', '-a', 's3cret pw', 'get', 'k']);
    assert.equal(read.stdout.toString(), 'v\n');
    const wrong = await run('redis-cli', ['-p', port, '--no-auth-warning', '-a', 'wrong', 'get', 'k']);
    assert.match(wrong.stderr, /AUTH failed: WRONGPASS invalid username-password pair/);
    assert.equal(wrong.stdout.toString(), 'NOAUTH Authentication required.\n\n');
  } finally {
    assert.equal(await guarded.stop(), 0);
    await authDir.cleanup();
  }
});

test(`redis-cli --pipe: mass insertion of ${PIPE_COMMANDS} SETs`, { skip: skipCli }, async () => {
  const parts: Buffer[] = [];
  for (let i = 0; i < PIPE_COMMANDS; i++) {
    const key = `pipe:${i}`;
    const value = `value-${i}-${'x'.repeat(i % 64)}`;
    parts.push(
      Buffer.from(`*3\r\n$3\r\nSET\r\n$${key.length}\r\n${key}\r\n$${value.length}\r\n${value}\r\n`),
    );
  }
  const keysBefore = Number(await cli('dbsize'));
  const piped = await run('redis-cli', ['-p', String(tessera.port), '--pipe'], Buffer.concat(parts));
  const out = piped.stdout.toString();
  assert.equal(piped.code, 0, `${out}${piped.stderr}`);
  assert.match(out, new RegExp(`errors: 0, replies: ${PIPE_COMMANDS}\\b`));
  for (const i of [0, 4321, PIPE_COMMANDS - 1]) {
    assert.equal(await cli('get', `pipe:${i}`), `value-${i}-${'x'.repeat(i % 64)}\n`);
  }
  // DBSIZE, not --scan --pattern: pattern scans page through the rate-limited background pool.
  assert.equal(Number(await cli('dbsize')), keysBefore + PIPE_COMMANDS);
});

/** redis-benchmark -q output: the final "requests per second" figure per test (progress lines end in CR). */
function benchmarkResults(out: string): Map<string, number> {
  const results = new Map<string, number>();
  for (const line of out.split(/[\r\n]+/)) {
    const m = /^\s*([^:]+): ([\d.]+) requests per second/.exec(line);
    if (m !== null) results.set(m[1].trim(), Number(m[2]));
  }
  return results;
}

const BENCHMARK_RUNS: Array<[label: string, args: string[]]> = [
  ['pipelined (-P 16)', ['-n', '2000', '-P', '16']],
  ['unpipelined (-c 10)', ['-n', '1000', '-c', '10']],
];

for (const [label, args] of BENCHMARK_RUNS) {
  test(`redis-benchmark ${label}: SET, GET, MSET run to the end`, { skip: skipBenchmark }, async () => {
    // redis-benchmark exits non-zero at the first error reply, and warns when CONFIG GET fails.
    const port = String(tessera.port);
    const r = await run('redis-benchmark', ['-p', port, '-t', 'set,get,mset', '-q', ...args]);
    const out = r.stdout.toString();
    assert.equal(r.code, 0, `${out}${r.stderr}`);
    assert.doesNotMatch(out + r.stderr, /error|warning/i);
    const results = benchmarkResults(out);
    assert.deepEqual([...results.keys()], ['SET', 'GET', 'MSET (10 keys)'], out);
    for (const [name, rps] of results) assert.ok(rps > 0, `${name}: ${rps} requests per second`);
    assert.equal(await cli('strlen', 'key:__rand_int__'), '3\n', "redis-benchmark's 3-byte value");
  });
}
