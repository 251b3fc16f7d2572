// Golden scripts for the fragment actor's state machine (src/core/fragment.ts): apply, read, expiry,
// flush fences and queue bounds, driven by scripted events with no worker, store or clock.
// Scripts: test/data/fragment/*.txt. Commands:
//   new [queue=N] [background-rate=N] [flush-interval=MS] [flush-writes=N] [now=MS] [log]
//         (`log`: over a store with a write-ahead log)
//   store key=K ts=W.L node=N [value=V | tombstone] [exp=MS]       seeds the committed store
//   write req=R key=K ts=W.L node=N [value=V | tombstone] [exp=MS] [dur=memory|store|stable] [pri=high|default|background]
//         [prior]   (asks whether a live value existed: reads the store even for the newest version)
//   direct req=R key=K ts=W.L node=N [value=V | tombstone] [exp=MS] [dur=…] [pri=…] now=MS
//         (tryDirectWrite: prints taken or refused, then the actions)
//   read req=R key=K [pri=…]
//   modify req=R key=K mod=set|getdel|getex|incrby|incrbyfloat|append|setrange|expire|persist|rename
//          |setbit|getbit|bitcount|bitpos|bitop
//          ts=W.L node=N [value=V] [exp=MS] [flags=nx,xx,gt,lt,get,keep] [arg=N] [operand=S] [dur=…]
//          [bit=0|1] (SETBIT's bit)  [args=A,B,…] (BITCOUNT's and BITPOS's arguments after the key)
//          [op=and|or|xor|not keys=K1,K2,…] (BITOP's operation and source keys)
//   fence req=R dur=store|stable [durability-only]  run now=MS [budget=N]  tick now=MS
//   committed gen=G   commit-failed gen=G msg=M   synced gen=G   sync-failed gen=G msg=M
//   logged gen=G   log-failed gen=G
//   sweep now=MS      (offers every stored record to the cleaner)   state    store-dump

import { basename } from 'node:path';
import { test } from 'node:test';
import { BIT_OPERATION_NAMES, encodeBitArgs } from '../../src/core/bits.js';
import { describeAction, type FragmentAction, FragmentCore, FragmentOp } from '../../src/core/fragment.js';
import { encodeKeys, Modifier, ModifyFlag } from '../../src/core/modify.js';
import { Durability, OpKind, Priority, parseDurability, parsePriority } from '../../src/core/ops.js';
import { describeRecord, encodeRecord, wallMsOf } from '../../src/core/record.js';
import { type Command, goldenFiles, intArg, runGoldenFile } from './datadriven.js';

class Harness {
  private store = new Map<string, Buffer>();
  private core: FragmentCore | undefined;
  /** The `new` command; the core is built at the first event, once the store is seeded, so its
   * stored high-water mark covers the seeded records as a real store's does. */
  private pending: Command | undefined;
  /** Commits the core asked for, applied to `store` when the script says `committed`. */
  private commits = new Map<number, Array<[Uint8Array, Uint8Array]>>();

  handle(c: Command): string {
    switch (c.name) {
      case 'new':
        return this.create(c);
      case 'store':
        this.store.set(c.args.get('key')!, recordOf(c));
        return '';
      case 'store-dump':
        return [...this.store.entries()]
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .map(([k, r]) => `${JSON.stringify(k)}=${describeRecord(r)}`)
          .join('\n');
      case 'state':
        return this.fragment().describe();
      case 'direct': {
        const op = opOf(c, OpKind.Write, recordOf(c));
        const taken = this.fragment().tryDirectWrite(
          op.reqId,
          op.priority,
          op.durability,
          op.key,
          op.record,
          intArg(c, 'now'),
        );
        return [taken ? 'taken' : 'refused', this.drain()].filter(Boolean).join('\n');
      }
      default:
        this.fragment().step(this.event(c));
        return this.drain();
    }
  }

  private create(c: Command): string {
    this.store.clear();
    this.commits.clear();
    this.core = undefined;
    this.pending = c;
    return '';
  }

  private build(c: Command): FragmentCore {
    let storedHighWater = 0;
    for (const r of this.store.values()) storedHighWater = Math.max(storedHighWater, wallMsOf(r));
    const reader = {
      get: (_f: number, key: Uint8Array) => this.store.get(Buffer.from(key).toString('latin1')),
    };
    return new FragmentCore(
      {
        fragment: 0,
        storedHighWaterWallMs: storedHighWater,
        valueBytesMax: intArg(c, 'value-bytes-max', 1 << 20),
        queueOpsMax: intArg(c, 'queue', 16),
        backgroundOpsPerSec: intArg(c, 'background-rate', 1000),
        flushIntervalMs: intArg(c, 'flush-interval', 100),
        flushWritesMax: intArg(c, 'flush-writes', 1000),
        flushBytesMax: intArg(c, 'flush-bytes', 1 << 20),
        logsWrites: c.args.has('log'),
      },
      reader,
      intArg(c, 'now', 1000),
    );
  }

  private fragment(): FragmentCore {
    if (this.core === undefined) {
      if (this.pending === undefined) throw new Error('script must start with "new"');
      this.core = this.build(this.pending);
    }
    return this.core;
  }

  private event(c: Command): Parameters<FragmentCore['step']>[0] {
    switch (c.name) {
      case 'write':
        return { kind: 'request', op: opOf(c, OpKind.Write, recordOf(c)) };
      case 'read':
        return { kind: 'request', op: opOf(c, OpKind.Read, undefined) };
      case 'modify':
        return { kind: 'request', op: modifyOf(c) };
      case 'fence': {
        const op = opOf(c, OpKind.Fence, undefined);
        op.durabilityOnly = c.args.has('durability-only');
        return { kind: 'request', op };
      }
      case 'run':
        return { kind: 'run', nowMs: intArg(c, 'now'), budget: intArg(c, 'budget', 1000) };
      case 'tick':
        return { kind: 'tick', nowMs: intArg(c, 'now') };
      case 'committed': {
        const generation = intArg(c, 'gen');
        for (const [k, r] of this.commits.get(generation) ?? []) {
          this.store.set(Buffer.from(k).toString('latin1'), Buffer.from(r));
        }
        this.commits.delete(generation);
        return { kind: 'committed', generation };
      }
      case 'commit-failed':
        this.commits.delete(intArg(c, 'gen'));
        return {
          kind: 'commit-failed',
          generation: intArg(c, 'gen'),
          message: c.args.get('msg') ?? 'failed',
        };
      case 'synced':
        return { kind: 'synced', generation: intArg(c, 'gen') };
      case 'logged':
        return { kind: 'logged', generation: intArg(c, 'gen') };
      case 'log-failed':
        return { kind: 'log-failed', generation: intArg(c, 'gen') };
      case 'sync-failed':
        return { kind: 'sync-failed', generation: intArg(c, 'gen'), message: c.args.get('msg') ?? 'failed' };
      case 'sweep': {
        const entries = [...this.store.entries()].map(([k, record]) => ({
          key: Buffer.from(k, 'latin1'),
          record,
        }));
        return { kind: 'sweep', nowMs: intArg(c, 'now'), entries };
      }
      default:
        throw new Error(`unknown command ${c.name}`);
    }
  }

  private drain(): string {
    const actions: FragmentAction[] = [];
    this.fragment().takeActions(actions);
    for (const a of actions) if (a.kind === 'commit') this.commits.set(a.generation, a.puts);
    return actions.map(describeAction).join('\n');
  }
}

function opOf(c: Command, kind: OpKind, record: Buffer | undefined): FragmentOp {
  const key = Buffer.from(c.args.get('key') ?? '', 'latin1');
  const priority = parsePriority(c.args.get('pri') ?? 'default') ?? Priority.Default;
  const durability = parseDurability(c.args.get('dur') ?? 'memory') ?? Durability.Memory;
  const op = new FragmentOp(kind, intArg(c, 'req'), priority, durability, key, record ?? Buffer.alloc(0));
  op.wantsPrior = c.args.has('prior');
  return op;
}

const MODIFIERS: Record<string, Modifier> = {
  set: Modifier.Set,
  getdel: Modifier.GetDel,
  getex: Modifier.GetEx,
  incrby: Modifier.IncrBy,
  incrbyfloat: Modifier.IncrByFloat,
  append: Modifier.Append,
  setrange: Modifier.SetRange,
  expire: Modifier.Expire,
  persist: Modifier.Persist,
  rename: Modifier.Rename,
  setbit: Modifier.SetBit,
  getbit: Modifier.GetBit,
  bitcount: Modifier.BitCount,
  bitpos: Modifier.BitPos,
  bitop: Modifier.BitOp,
};
const FLAGS: Record<string, number> = {
  nx: ModifyFlag.Nx,
  xx: ModifyFlag.Xx,
  gt: ModifyFlag.Gt,
  lt: ModifyFlag.Lt,
  get: ModifyFlag.Get,
  keep: ModifyFlag.KeepDeadline,
};

function modifyOf(c: Command): FragmentOp {
  const op = opOf(c, OpKind.Modify, recordOf(c));
  const name = c.args.get('mod') ?? '';
  if (!(name in MODIFIERS)) throw new Error(`${c.line}: unknown mod=${name}`);
  op.modifier = MODIFIERS[name];
  for (const flag of (c.args.get('flags') ?? '').split(',').filter(Boolean)) op.flags |= FLAGS[flag];
  op.arg = intArg(c, 'arg', 0);
  const operand = c.args.get('operand');
  op.operand = operand === undefined ? undefined : Buffer.from(operand, 'latin1');
  // SETBIT's bit travels in the flags; BITCOUNT's and BITPOS's arguments in the operand.
  if (c.args.has('bit')) op.flags = intArg(c, 'bit');
  const args = c.args.get('args');
  if (args !== undefined)
    op.operand = encodeBitArgs(args === '' ? [] : args.split(',').map((a) => Buffer.from(a)));
  // BITOP's operation travels in the flags, its source keys in the operand.
  const operation = c.args.get('op');
  if (operation !== undefined) op.flags = BIT_OPERATION_NAMES[operation.toUpperCase()];
  const sources = c.args.get('keys');
  if (sources !== undefined) op.operand = encodeKeys(sources.split(',').map((k) => Buffer.from(k)));
  return op;
}

function recordOf(c: Command, headerOnly = false): Buffer {
  const [wall, logical] = (c.args.get('ts') ?? '0.0').split('.').map(Number);
  const node = Buffer.from(c.args.get('node') ?? 'n1');
  const tombstone = c.args.has('tombstone');
  const value = headerOnly || tombstone ? undefined : Buffer.from(c.args.get('value') ?? '', 'latin1');
  return encodeRecord(tombstone, wall, logical ?? 0, intArg(c, 'exp', 0), node, value);
}

for (const file of goldenFiles('fragment')) {
  test(`fragment golden: ${basename(file)}`, () => {
    const harness = new Harness();
    runGoldenFile(file, (c) => harness.handle(c));
  });
}
