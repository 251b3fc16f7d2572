// The `tessera` command as an operator runs it: a readiness line in JSON, graceful shutdown on
// SIGTERM, SIGINT and the SHUTDOWN command, clear refusals of bad flags.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tessera } from '../../src/main/node.js';
import { killedAfterTests } from './children.js';
import { tempDir } from './helpers.js';
import { RawClient } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

for (const trigger of ['SIGTERM', 'SIGINT', 'SHUTDOWN'] as const) {
  test(`starts, logs readiness as JSON, and shuts down gracefully on ${trigger}`, async () => {
    const dir = await tempDir('cli');
    try {
      const child = killedAfterTests(
        spawn(
          process.execPath,
          [MAIN, '--data-dir', dir.path, '--workers', '2', '--fragments', '8', '--port', '0'],
          {
            stdio: ['ignore', 'pipe', 'inherit'],
          },
        ),
      );
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      const lines: Array<Record<string, unknown>> = [];
      let client: RawClient | undefined;
      for await (const line of createInterface({ input: child.stdout })) {
        const entry = JSON.parse(line) as Record<string, unknown>;
        lines.push(entry);
        if (entry.msg !== 'ready') continue;
        if (trigger !== 'SHUTDOWN') child.kill(trigger);
        else {
          // A write acknowledged before SHUTDOWN is there after it; SHUTDOWN itself answers nothing.
          client = await RawClient.connect(entry.port as number);
          assert.equal(await client.call('SET', 'cli:k', 'kept'), '+OK\r\n');
          client.sendCommand('SHUTDOWN', 'NOSAVE', 'NOW');
          await client.closedWithin();
          assert.equal(client.receivedBytes, '+OK\r\n'.length, 'SHUTDOWN sent no reply');
        }
      }
      assert.equal(await exited, 0);
      const started = lines.find((l) => l.msg === 'node started');
      assert.ok(started, 'a node started line');
      assert.equal(started.store, 'lmdb');
      assert.equal(started.fragments, 8);
      assert.equal(started.workers, 2);
      assert.ok(lines.some((l) => l.msg === 'shutting down' && l.reason === trigger));
      assert.ok(lines.some((l) => l.msg === 'node closed'));
      if (trigger === 'SHUTDOWN') {
        const node = await Tessera.start({ dataDir: dir.path, workers: 2, fragments: 8 });
        try {
          assert.equal((await node.get('cli:k'))?.toString(), 'kept');
        } finally {
          await node.close();
        }
      }
    } finally {
      await dir.cleanup();
    }
  });
}

test('tessera status and tessera placement ask a running node through its admin port', async () => {
  const dir = await tempDir('cli-admin');
  const child = killedAfterTests(
    spawn(
      process.execPath,
      [
        MAIN,
        '--data-dir',
        dir.path,
        '--workers',
        '1',
        '--fragments',
        '4',
        '--port',
        '0',
        '--admin-port',
        '0',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    ),
  );
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    let adminPort: number | undefined;
    for await (const line of createInterface({ input: child.stdout })) {
      const entry = JSON.parse(line) as Record<string, unknown>;
      if (entry.msg === 'ready') {
        adminPort = entry.adminPort as number;
        break;
      }
    }
    // The rest of the log is not read: keep the pipe flowing.
    child.stdout!.resume();
    assert.ok(adminPort !== undefined && adminPort > 0, 'the ready line names the admin port');
    const ask = (...args: string[]) =>
      spawnSync(process.execPath, [MAIN, ...args, '--admin-port', String(adminPort)], { encoding: 'utf8' });
    const status = ask('status');
    assert.equal(status.status, 0, status.stderr);
    assert.match(
      status.stdout,
      /^node n-[0-9a-f]+: healthy \(store lmdb, durability store, 4 fragments\)\n {2}worker 0: ready, 0 restarts, 4 fragments, 0 queued\n$/,
    );
    const placement = ask('placement');
    assert.equal(placement.status, 0, placement.stderr);
    const lines = placement.stdout.trim().split('\n');
    assert.equal(lines.length, 5);
    assert.match(lines[1], /^ {7}0 {2}0-4095 +n-[0-9a-f]+ +n-[0-9a-f]+$/);
    const noPort = spawnSync(process.execPath, [MAIN, 'status'], { encoding: 'utf8', env: {} });
    assert.equal(noPort.status, 2);
    assert.match(noPort.stderr, /give the node's admin port/);
  } finally {
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
    await dir.cleanup();
  }
});

test('bad flags exit 2 with a message; --help exits 0', () => {
  const bad = spawnSync(process.execPath, [MAIN, '--store', 'memory', '--bogus'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /unknown flag --bogus/);
  // A value the node refuses is one plain line naming the flag as given, exit status 2, as a parse error.
  const invalid = spawnSync(process.execPath, [MAIN, '--store', 'memory', '--fragments', '0'], {
    encoding: 'utf8',
  });
  assert.equal(invalid.status, 2);
  assert.equal(invalid.stdout, '');
  assert.equal(invalid.stderr, 'tessera: invalid input: --fragments must be an integer in 1..16384, got 0\n');
  // From the environment: the variable is named too.
  const fromEnv = spawnSync(process.execPath, [MAIN, '--store', 'memory'], {
    encoding: 'utf8',
    env: { ...process.env, TESSERA_VALUE_BYTES_MAX: '0' },
  });
  assert.equal(fromEnv.status, 2);
  assert.match(
    fromEnv.stderr,
    /^tessera: invalid input: --value-bytes-max \(from TESSERA_VALUE_BYTES_MAX\) must be/,
  );
  // An unreadable certificate file names its flag, before anything starts.
  const noCert = spawnSync(
    process.execPath,
    [
      MAIN,
      ...['--store', 'memory', '--node-id', 'a', '--peers', 'a@127.0.0.1:7001,b@127.0.0.1:7002'],
      ...[
        '--tls-cluster',
        '--tls-cert-file',
        '/nonexistent/c.pem',
        '--tls-key-file',
        'k',
        '--tls-ca-cert-file',
        'ca',
      ],
    ],
    { encoding: 'utf8' },
  );
  assert.equal(noCert.status, 2);
  assert.match(noCert.stderr, /--tls-cert-file: ENOENT/);
  const help = spawnSync(process.execPath, [MAIN, '--help'], { encoding: 'utf8' });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /--durability/);
});

test('one node per data directory: a second start is refused naming the holder, and a close frees it', async () => {
  const dir = await tempDir('cli-lock');
  try {
    const holder = await Tessera.start({ dataDir: dir.path, workers: 1, fragments: 8 });
    try {
      const second = spawnSync(
        process.execPath,
        [MAIN, '--data-dir', dir.path, '--workers', '1', '--fragments', '8', '--port', '0'],
        { encoding: 'utf8' },
      );
      assert.equal(second.status, 2);
      assert.match(
        second.stderr,
        new RegExp(`^tessera: .*data directory ${dir.path} is in use by process ${process.pid}`),
      );
      await assert.rejects(
        Tessera.start({ dataDir: dir.path, workers: 1, fragments: 8 }),
        new RegExp(`in use by process ${process.pid}`),
      );
      // The refused start left the holder's data alone.
      await holder.put('k', 'v');
    } finally {
      await holder.close();
    }
    const again = await Tessera.start({ dataDir: dir.path, workers: 1, fragments: 8 });
    try {
      assert.equal((await again.get('k'))?.toString(), 'v');
    } finally {
      await again.close();
    }
  } finally {
    await dir.cleanup();
  }
});

test('options that disagree with the data directory are one plain line, saying whether the value was given', async () => {
  const dir = await tempDir('cli-fragments');
  try {
    const created = await Tessera.start({ dataDir: dir.path, workers: 1, fragments: 4 });
    await created.close();
    const run = (...flags: string[]) =>
      spawnSync(process.execPath, [MAIN, '--data-dir', dir.path, '--workers', '1', '--port', '0', ...flags], {
        encoding: 'utf8',
      });
    const defaulted = run();
    assert.equal(defaulted.status, 2);
    assert.match(
      defaulted.stderr,
      new RegExp(
        `^tessera: .*data directory ${dir.path} was created with 4 fragments; this node was started without --fragments, whose default is 16\\. Start with --fragments 4`,
      ),
    );
    assert.equal(defaulted.stderr.trim().split('\n').length, 1, 'one line');
    const given = run('--fragments', '8');
    assert.equal(given.status, 2);
    assert.match(
      given.stderr,
      /^tessera: .*this node was started with --fragments 8\. Start with --fragments 4/,
    );
  } finally {
    await dir.cleanup();
  }
});

test('a client port in use stops the start before it creates the data directory', async () => {
  const dir = await tempDir('cli-port');
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = taken.address() as AddressInfo;
    const dataDir = path.join(dir.path, 'data');
    const start = spawnSync(process.execPath, [MAIN, '--data-dir', dataDir, '--port', String(port)], {
      encoding: 'utf8',
    });
    assert.equal(start.status, 2);
    assert.match(
      start.stderr,
      new RegExp(`^tessera: --port ${port} cannot be bound on 127\\.0\\.0\\.1: .*EADDRINUSE`),
    );
    assert.equal(existsSync(dataDir), false, 'no data directory was made');
  } finally {
    await new Promise((resolve) => taken.close(resolve));
    await dir.cleanup();
  }
});
