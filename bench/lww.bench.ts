// The LWW apply path of a fragment actor: merge a write over the freshest record and queue the
// reply, without a store (the committed records come from a Map).

import { type FragmentAction, FragmentCore, FragmentOp } from '../src/core/fragment.js';
import { Durability, OpKind, Priority } from '../src/core/ops.js';
import { compareVersions, encodeRecord, mergeOutcome } from '../src/core/record.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;
const KEYS = 10_000;

export async function lwwBench(): Promise<BenchRow[]> {
  const nodeId = Buffer.from('n1');
  const value = Buffer.alloc(100, 1);
  const stored = new Map<string, Uint8Array>();
  const core = new FragmentCore(
    {
      fragment: 0,
      valueBytesMax: 4 << 20,
      storedHighWaterWallMs: 0,
      queueOpsMax: BATCH * 2,
      backgroundOpsPerSec: 1000,
      flushIntervalMs: 100,
      flushWritesMax: 4096,
      flushBytesMax: 2 ** 30,
    },
    { get: (_f, key) => stored.get(Buffer.from(key).toString('latin1')) },
    0,
  );
  const keys = Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${i}`));
  const actions: FragmentAction[] = [];
  let wall = 1;
  let n = 0;
  const applyBatch = () => {
    for (let i = 0; i < BATCH; i++) {
      const key = keys[n++ % KEYS];
      const record = encodeRecord(false, wall++, 0, 0, nodeId, value);
      core.step({
        kind: 'request',
        op: new FragmentOp(OpKind.Write, i, Priority.Default, Durability.Memory, key, record),
      });
    }
    core.step({ kind: 'run', nowMs: 0, budget: BATCH });
    core.takeActions(actions);
    for (const a of actions)
      if (a.kind === 'commit') core.step({ kind: 'committed', generation: a.generation });
    actions.length = 0;
    core.takeActions(actions);
    actions.length = 0;
  };
  const a = encodeRecord(false, 5, 1, 0, nodeId, value);
  const b = encodeRecord(false, 5, 2, 0, nodeId, value);
  let sink = 0;
  const merge = () => {
    for (let i = 0; i < BATCH; i++) sink += mergeOutcome(a, b, 0) + compareVersions(b, a);
  };
  const rows = await runTasks('lww', [
    { name: 'fragment apply (write → reply, memory)', opsPerCall: BATCH, fn: applyBatch },
    { name: 'mergeOutcome + compareVersions', opsPerCall: BATCH, fn: merge },
  ]);
  if (sink === -1) console.log(sink);
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await lwwBench()));
