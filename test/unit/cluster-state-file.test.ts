// The cluster state a node keeps in its data directory (src/native-bindings/cluster-state-file.ts;
// DESIGN.md "Cluster"): the member list and this node's incarnation survive a restart, which bumps
// the incarnation; the last accepted assignment table survives it too; a malformed, foreign or
// later-format file is refused naming the file and what is wrong; an interrupted write leaves the
// old state.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { encodeTable } from '../../src/core/assignment-table.js';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import { CLUSTER_STATE_BYTES_MAX, CLUSTER_STATE_MEMBERS_MAX } from '../../src/core/limits.js';
import type { MemberRecord } from '../../src/core/membership-types.js';
import {
  CLUSTER_STATE_FILE,
  CLUSTER_STATE_FORMAT,
  type ClusterState,
  type ClusterStateOwner,
  readClusterState,
  startIncarnation,
  writeClusterState,
} from '../../src/native-bindings/cluster-state-file.js';
import { sampleTable } from './fixtures/sample-table.js';

const FRAGMENTS = 8;
const OWNER: ClusterStateOwner = { nodeId: 'n-a', fragmentCount: FRAGMENTS };
const MEMBERS: MemberRecord[] = [
  { nodeId: 'n-a', address: '127.0.0.1:7001', incarnation: 3, state: 'Up' },
  { nodeId: 'n-b', address: '127.0.0.1:7002', incarnation: 9, state: 'Leaving' },
  { nodeId: 'n-c', address: '127.0.0.1:7003', incarnation: 1, state: 'Down' },
  // Heard of only as removed: membership knows no address for it.
  { nodeId: 'n-d', address: '', incarnation: 2, state: 'Removed' },
];

const sampleState = (): ClusterState => ({
  nodeId: 'n-a',
  incarnation: 3,
  members: MEMBERS,
  table: sampleTable(),
  promise: { epoch: 7, to: { id: 'n-b', incarnation: 9 } },
});

/** The file's JSON for `sampleState()`, to be spoiled one field at a time. */
function sampleJson(): Record<string, unknown> {
  return {
    format: CLUSTER_STATE_FORMAT,
    nodeId: 'n-a',
    incarnation: 3,
    members: MEMBERS.map((m) => ({ ...m })),
    table: encodeTable(sampleTable()),
  };
}

/** A Storage error naming the file and its directory, whose message contains every one of `parts`. */
const refusedWith =
  (dataDir: string, ...parts: string[]) =>
  (err: unknown): boolean => {
    assert.ok(err instanceof TesseraError, `not a TesseraError: ${String(err)}`);
    assert.equal(err.kind, ErrorKind.Storage);
    for (const p of [dataDir, CLUSTER_STATE_FILE, ...parts])
      assert.ok(err.message.includes(p), `message lacks "${p}": ${err.message}`);
    return true;
  };

function assertSameState(actual: ClusterState | undefined, expected: ClusterState): void {
  assert.ok(actual !== undefined);
  assert.equal(actual.nodeId, expected.nodeId);
  assert.equal(actual.incarnation, expected.incarnation);
  assert.deepEqual(actual.members, expected.members);
  assert.deepEqual(actual.promise, expected.promise);
  if (expected.table === null) assert.equal(actual.table, null);
  else {
    assert.ok(actual.table !== null);
    assert.deepEqual(encodeTable(actual.table), encodeTable(expected.table));
    assert.equal(actual.table.describe(), expected.table.describe());
  }
}

describe('cluster state file', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });
  async function freshDir(): Promise<string> {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-cluster-state-'));
    dirs.push(dir);
    return dir;
  }
  const fileIn = (dir: string): string => path.join(dir, CLUSTER_STATE_FILE);

  it('reads back what it wrote: members, incarnation and the table, leaving no temp file', async () => {
    const dir = await freshDir();
    await writeClusterState(dir, sampleState());
    assertSameState(await readClusterState(dir, OWNER), sampleState());
    assert.deepEqual(await fs.readdir(dir), [CLUSTER_STATE_FILE]);
    // Membership's views carry flags that are not stored: a view is written as its record.
    const views = MEMBERS.map((m) => ({ ...m, unreachable: true, suspect: false }));
    await writeClusterState(dir, { ...sampleState(), members: views });
    assertSameState(await readClusterState(dir, OWNER), sampleState());
    // A later write replaces the whole state; a node that has accepted no table stores null.
    const next: ClusterState = {
      nodeId: 'n-a',
      incarnation: 4,
      members: [{ ...MEMBERS[0], incarnation: 4 }, MEMBERS[1]],
      table: null,
      promise: null,
    };
    await writeClusterState(dir, next);
    assertSameState(await readClusterState(dir, OWNER), next);
    assert.deepEqual(await fs.readdir(dir), [CLUSTER_STATE_FILE]);
  });

  it('refuses to write what a restart would refuse to read, keeping the stored state', async () => {
    const dir = await freshDir();
    await writeClusterState(dir, sampleState());
    const torn: ClusterState = { ...sampleState(), incarnation: 4 };
    await assert.rejects(writeClusterState(dir, torn), {
      name: 'AssertionFailure',
      message: "cluster state to write: this node's member record is at incarnation 3, the file at 4",
    });
    assertSameState(await readClusterState(dir, OWNER), sampleState());
    assert.deepEqual(await fs.readdir(dir), [CLUSTER_STATE_FILE]);
  });

  it('a file written before promises were kept, without "promise", reads as no promise made', async () => {
    const dir = await freshDir();
    const json = sampleJson();
    assert.equal('promise' in json, false);
    await fs.writeFile(fileIn(dir), JSON.stringify(json));
    assertSameState(await readClusterState(dir, OWNER), { ...sampleState(), promise: null });
    await fs.writeFile(fileIn(dir), JSON.stringify({ ...json, promise: null }));
    assertSameState(await readClusterState(dir, OWNER), { ...sampleState(), promise: null });
    // A start keeps it so, and writes it out as null.
    const started = await startIncarnation(dir, OWNER);
    assert.equal(started.promise, null);
    assert.equal(JSON.parse(await fs.readFile(fileIn(dir), 'utf8')).promise, null);
  });

  it('a missing file, or a missing data directory, is a fresh node', async () => {
    const dir = await freshDir();
    assert.equal(await readClusterState(dir, OWNER), undefined);
    assert.equal(await readClusterState(path.join(dir, 'absent'), OWNER), undefined);
  });

  it('each start bumps the incarnation durably, never going back, and keeps members and table', async () => {
    const dir = await freshDir();
    const first = await startIncarnation(dir, OWNER, 1_796_000_000_000.5);
    // A first start takes the wall clock's milliseconds: above what an earlier run of this node id,
    // on a data directory since lost, used.
    assert.equal(first.incarnation, 1_796_000_000_000);
    assert.equal(first.firstStart, true);
    assert.deepEqual(first.members, []);
    assert.equal(first.table, null);
    assertSameState(await readClusterState(dir, OWNER), first);

    await writeClusterState(dir, sampleState());
    let previous = sampleState().incarnation;
    for (let restart = 0; restart < 5; restart++) {
      const started = await startIncarnation(dir, OWNER);
      assert.equal(started.incarnation, previous + 1);
      assert.equal(started.firstStart, false);
      // What the next start reads is what this one returned: the bump was written before it returned.
      const stored = await readClusterState(dir, OWNER);
      assertSameState(stored, started);
      // This node's own record moves with it; the others' stay as they were.
      assert.deepEqual(
        started.members,
        MEMBERS.map((m) => (m.nodeId === 'n-a' ? { ...m, incarnation: started.incarnation } : m)),
      );
      assert.ok(started.table !== null);
      assert.equal(started.table.describe(), sampleTable().describe());
      previous = started.incarnation;
    }
  });

  it('an interrupted write leaves the old state, and the next start removes its temp file', async () => {
    const dir = await freshDir();
    await writeClusterState(dir, sampleState());
    // A write cut off before its rename: a torn temp file beside the file it was to replace.
    const newer = JSON.stringify({ ...sampleJson(), incarnation: 40 });
    const torn = path.join(dir, `${CLUSTER_STATE_FILE}.4242.0badf00d.tmp`);
    await fs.writeFile(torn, newer.slice(0, newer.length / 2));
    // And one that was written whole but never renamed: it is not the state either.
    const whole = path.join(dir, `${CLUSTER_STATE_FILE}.4243.0badf00d.tmp`);
    await fs.writeFile(whole, newer);
    assertSameState(await readClusterState(dir, OWNER), sampleState());
    const started = await startIncarnation(dir, OWNER);
    assert.equal(started.incarnation, sampleState().incarnation + 1);
    assert.deepEqual(await fs.readdir(dir), [CLUSTER_STATE_FILE]);
  });

  describe('refuses a malformed file, saying what is wrong and what to do', () => {
    const cases: Array<{ name: string; text: () => string; parts: string[] }> = [
      {
        name: 'bad JSON',
        text: () => '{"format": 1, "nodeId": ',
        parts: ['not JSON', 'Restore it from a backup'],
      },
      { name: 'not an object', text: () => '[1, 2]', parts: ['not a JSON object'] },
      {
        name: 'a later format',
        text: () => JSON.stringify({ ...sampleJson(), format: CLUSTER_STATE_FORMAT + 1 }),
        parts: [`format ${CLUSTER_STATE_FORMAT + 1}`, `reads format ${CLUSTER_STATE_FORMAT}`],
      },
      {
        name: 'no format',
        text: () => JSON.stringify({ ...sampleJson(), format: undefined }),
        parts: ['bad "format"'],
      },
      {
        name: 'an unknown field',
        text: () => JSON.stringify({ ...sampleJson(), extra: true }),
        parts: ['unknown field "extra"'],
      },
      {
        name: 'a negative incarnation',
        text: () => JSON.stringify({ ...sampleJson(), incarnation: -1 }),
        parts: ['bad "incarnation"'],
      },
      {
        name: 'an unknown member state',
        text: () => {
          const json = sampleJson();
          (json.members as MemberRecord[])[1] = { ...MEMBERS[1], state: 'Zombie' as MemberRecord['state'] };
          return JSON.stringify(json);
        },
        parts: ['members[1]: unknown state "Zombie"'],
      },
      {
        name: 'a member without an address',
        text: () => {
          const json = sampleJson();
          (json.members as Array<Partial<MemberRecord>>)[2] = { ...MEMBERS[2], address: undefined };
          return JSON.stringify(json);
        },
        parts: ['members[2]: bad "address"'],
      },
      {
        name: 'a member listed twice',
        text: () => JSON.stringify({ ...sampleJson(), members: [MEMBERS[0], MEMBERS[1], MEMBERS[1]] }),
        parts: ['members[2]: node id n-b listed twice'],
      },
      {
        name: 'more members than the bound',
        text: () => {
          const members = Array.from({ length: CLUSTER_STATE_MEMBERS_MAX + 1 }, (_, i) => ({
            ...MEMBERS[1],
            nodeId: `n-${i}`,
          }));
          return JSON.stringify({ ...sampleJson(), members });
        },
        parts: [`${CLUSTER_STATE_MEMBERS_MAX + 1} members, more than CLUSTER_STATE_MEMBERS_MAX`],
      },
      {
        name: "this node's record at another incarnation than the file's",
        text: () => JSON.stringify({ ...sampleJson(), incarnation: 5 }),
        parts: ["this node's member record is at incarnation 3, the file at 5"],
      },
      {
        name: 'a table that decodeTable refuses',
        text: () => {
          const table = encodeTable(sampleTable());
          table.entries[0] = { ...table.entries[0], fragment: FRAGMENTS };
          return JSON.stringify({ ...sampleJson(), table });
        },
        parts: ['bad "table"', `entries[0].fragment ${FRAGMENTS} is out of range`],
      },
      ...(
        [
          ['a promise that is not an object', 'promised'],
          ['a promise without an epoch', { to: { id: 'n-b', incarnation: 9 } }],
          ['a promise of a negative epoch', { epoch: -1, to: { id: 'n-b', incarnation: 9 } }],
          ['a promise of a fractional epoch', { epoch: 1.5, to: { id: 'n-b', incarnation: 9 } }],
          ['a promise to no one', { epoch: 7, to: null }],
          ['a promise to an empty node id', { epoch: 7, to: { id: '', incarnation: 9 } }],
          ['a promise to a coordinator without an incarnation', { epoch: 7, to: { id: 'n-b' } }],
        ] as const
      ).map(([name, promise]) => ({
        name,
        text: () => JSON.stringify({ ...sampleJson(), promise }),
        parts: ['bad "promise"'],
      })),
      {
        name: 'a table in another format',
        text: () => JSON.stringify({ ...sampleJson(), table: { ...encodeTable(sampleTable()), format: 99 } }),
        parts: ['bad "table"', 'format 99'],
      },
    ];
    for (const c of cases) {
      it(c.name, async () => {
        const dir = await freshDir();
        await fs.writeFile(fileIn(dir), c.text());
        await assert.rejects(readClusterState(dir, OWNER), refusedWith(dir, ...c.parts));
        // A start refuses it too, and leaves the file for the operator to look at.
        await assert.rejects(startIncarnation(dir, OWNER), refusedWith(dir, ...c.parts));
        assert.equal(await fs.readFile(fileIn(dir), 'utf8'), c.text());
      });
    }

    it('oversized, before reading it', async () => {
      const dir = await freshDir();
      // Sparse: the size is checked before a byte is read.
      await fs.writeFile(fileIn(dir), '');
      await fs.truncate(fileIn(dir), CLUSTER_STATE_BYTES_MAX + 1);
      await assert.rejects(
        readClusterState(dir, OWNER),
        refusedWith(dir, `${CLUSTER_STATE_BYTES_MAX + 1} bytes, more than CLUSTER_STATE_BYTES_MAX`),
      );
    });
  });

  describe("refuses another node's file", () => {
    it('naming another node', async () => {
      const dir = await freshDir();
      await writeClusterState(dir, sampleState());
      await assert.rejects(
        readClusterState(dir, { ...OWNER, nodeId: 'n-z' }),
        refusedWith(
          dir,
          'holds the state of node n-a',
          'MANIFEST.json is for node n-z',
          'copied from another node',
        ),
      );
    });

    it('holding a table of another fragment count', async () => {
      const dir = await freshDir();
      await writeClusterState(dir, sampleState());
      await assert.rejects(
        readClusterState(dir, { ...OWNER, fragmentCount: 16 }),
        refusedWith(dir, `a table of ${FRAGMENTS} fragments`, 'MANIFEST.json is for 16 fragments'),
      );
    });
  });
});
