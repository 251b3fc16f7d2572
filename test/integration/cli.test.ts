// The `tessera` command as an operator runs it: a readiness line in JSON, graceful shutdown on
// SIGTERM, SIGINT and the SHUTDOWN command, clear refusals of bad flags.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tessera } from '../../src/main/node.js';
import { tempDir } from './helpers.js';
import { RawClient } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

for (const trigger of ['SIGTERM', 'SIGINT', 'SHUTDOWN'] as const) {
  test(`starts, logs readiness as JSON, and shuts down gracefully on ${trigger}`, async () => {
    const dir = await tempDir('cli');
    try {
      const child = spawn(
        process.execPath,
        [MAIN, '--data-dir', dir.path, '--workers', '2', '--fragments', '8', '--port', '0'],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
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

test('bad flags exit 2 with a message; --help exits 0', () => {
  const bad = spawnSync(process.execPath, [MAIN, '--store', 'memory', '--bogus'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /unknown flag --bogus/);
  const invalid = spawnSync(process.execPath, [MAIN, '--store', 'memory', '--fragments', '0'], {
    encoding: 'utf8',
  });
  assert.equal(invalid.status, 1);
  assert.match(invalid.stdout, /TESSERA_INVALID_INPUT/);
  const help = spawnSync(process.execPath, [MAIN, '--help'], { encoding: 'utf8' });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /--durability/);
});
