// Crash safety of read-modify-write commands over the Redis protocol: a `tessera` process takes
// INCRBY, APPEND, SETRANGE, SET … GET, GETDEL, DEL and RENAME from many connections at `store` or
// `stable` durability and is killed with SIGKILL mid-stream. Each group of two keys (one hash slot)
// is driven by one sequence of commands, one at a time, and a model predicts every reply, so the
// run also checks the commands under concurrency. After a restart on the same directory each
// group holds exactly the state after its last acknowledged command, or after the one command it
// had in flight at the kill (which may or may not have been applied).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { NodeProcess } from '../integration/cluster-helpers.js';
import { tempDir } from '../integration/helpers.js';
import { xorshift32 } from '../unit/fixtures/xorshift32.js';

/** Key groups, and the connections they share (a connection pipelines its groups' commands). */
const GROUPS = 96;
const CONNECTIONS = 8;
/** Acknowledged commands to wait for before the kill, and a time bound for a slow machine. */
const ACKS_BEFORE_KILL = 15_000;
const KILL_AFTER_MS = 10_000;
const NOT_INTEGER = 'ERR value is not an integer or out of range';
const NO_SUCH_KEY = 'ERR no such key';

/** A group's two keys: `a` and `b`, values as bytes (SETRANGE pads with zero bytes). */
type GroupState = [a: Buffer | undefined, b: Buffer | undefined];
/** What a command should answer, and the state it leaves. */
interface Step {
  args: Array<string | Buffer>;
  reply: Buffer | number | string | null;
  after: GroupState;
}

/** Uniform in [0, 1), replayable from the seed. */
function rng(seed: number): () => number {
  const next = xorshift32(seed);
  return () => next() / 2 ** 32;
}

/** An integer as Redis's string2ll accepts it (no leading zeros, no `-0`, no sign alone). */
function asInteger(value: Buffer | undefined): number | undefined {
  if (value === undefined) return 0;
  const text = value.toString('latin1');
  return /^(0|-?[1-9][0-9]{0,14})$/.test(text) ? Number(text) : undefined;
}

function letters(random: () => number, max: number): string {
  let s = '';
  for (let n = 1 + Math.floor(random() * max); n > 0; n--)
    s += String.fromCharCode(97 + Math.floor(random() * 26));
  return s;
}

/** The next command for a group in `state`, with the reply and state the model predicts. */
function nextStep(random: () => number, keys: [string, string], state: GroupState): Step {
  const i = random() < 0.7 ? 0 : 1;
  const key = keys[i];
  const current = state[i];
  const withKey = (value: Buffer | undefined): GroupState =>
    i === 0 ? [value, state[1]] : [state[0], value];
  const pick = random();
  if (pick < 0.3) {
    const by = Math.floor(random() * 2001) - 1000;
    const n = asInteger(current);
    if (n === undefined) return { args: ['INCRBY', key, String(by)], reply: NOT_INTEGER, after: state };
    return { args: ['INCRBY', key, String(by)], reply: n + by, after: withKey(Buffer.from(String(n + by))) };
  }
  if (pick < 0.45) {
    const tail = Buffer.from(letters(random, 6));
    const value = Buffer.concat([current ?? Buffer.alloc(0), tail]);
    return { args: ['APPEND', key, tail], reply: value.length, after: withKey(value) };
  }
  if (pick < 0.55) {
    const offset = Math.floor(random() * 24);
    const patch = Buffer.from(letters(random, 4));
    const value = Buffer.alloc(Math.max(current?.length ?? 0, offset + patch.length));
    current?.copy(value);
    patch.copy(value, offset);
    return { args: ['SETRANGE', key, String(offset), patch], reply: value.length, after: withKey(value) };
  }
  if (pick < 0.7) {
    const value = Buffer.from(random() < 0.5 ? String(Math.floor(random() * 100)) : letters(random, 8));
    return { args: ['SET', key, value, 'GET'], reply: current ?? null, after: withKey(value) };
  }
  if (pick < 0.78) return { args: ['GETDEL', key], reply: current ?? null, after: withKey(undefined) };
  if (pick < 0.85) {
    const live = (state[0] === undefined ? 0 : 1) + (state[1] === undefined ? 0 : 1);
    return { args: ['DEL', keys[0], keys[1]], reply: live, after: [undefined, undefined] };
  }
  const [from, to] = i === 0 ? [0, 1] : [1, 0];
  const moved = state[from];
  if (moved === undefined)
    return { args: ['RENAME', keys[from], keys[to]], reply: NO_SUCH_KEY, after: state };
  const after: GroupState = from === 0 ? [undefined, moved] : [moved, undefined];
  return { args: ['RENAME', keys[from], keys[to]], reply: 'OK', after };
}

function sameReply(got: unknown, want: Step['reply']): boolean {
  if (want === null) return got === null;
  if (typeof want === 'number') return got === want;
  if (typeof want === 'string') return Buffer.isBuffer(got) && got.toString('latin1') === want;
  return Buffer.isBuffer(got) && got.equals(want);
}

function show(state: GroupState): string {
  return JSON.stringify(state.map((v) => v?.toString('latin1') ?? null));
}

interface Group {
  keys: [string, string];
  /** State after the last acknowledged command. */
  acked: GroupState;
  /** State if the command in flight at the kill was applied; undefined when none was in flight. */
  inFlight: GroupState | undefined;
  acks: number;
}

for (const [store, durability] of [
  ['lmdb', 'store'],
  ['lmdb', 'stable'],
  ['level', 'store'],
] as const) {
  test(`SIGKILL under read-modify-write commands (${store}, ${durability}): each key group keeps its last acknowledged state`, async () => {
    const seed = Number(process.env.TESSERA_SEED ?? Date.now() % 2 ** 31);
    console.log(`seed ${seed} (TESSERA_SEED replays)`);
    const dir = await tempDir(`resp-crash-${store}-${durability}`);
    const [port] = await freePorts(1);
    const node = new NodeProcess('crash', port, 0, dir.path, [
      '--store',
      store,
      '--durability',
      durability,
      '--workers',
      '2',
      '--fragments',
      '16',
    ]);
    try {
      await node.start();
      const clients = await Promise.all(Array.from({ length: CONNECTIONS }, () => node.client()));
      const groups: Group[] = Array.from({ length: GROUPS }, (_, g) => ({
        keys: [`{g${g}}a`, `{g${g}}b`],
        acked: [undefined, undefined],
        inFlight: undefined,
        acks: 0,
      }));
      let acks = 0;
      let killed = false;
      let killedAt = 0;
      const allAcked = new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, KILL_AFTER_MS);
        const check = setInterval(() => {
          if (acks >= ACKS_BEFORE_KILL) {
            clearTimeout(timer);
            clearInterval(check);
            resolve();
          }
        }, 5);
        timer.unref();
      });
      const drive = async (group: Group, g: number): Promise<void> => {
        const client = clients[g % CONNECTIONS];
        // Each group draws from its own generator: the interleaving of groups varies, their commands do not.
        const random = rng(seed + g);
        for (;;) {
          const step = nextStep(random, group.keys, group.acked);
          group.inFlight = step.after;
          let got: unknown;
          try {
            got = await client.callBuffer(String(step.args[0]), ...step.args.slice(1));
          } catch (err) {
            if (killed) return;
            got = Buffer.from((err as Error).message);
          }
          // A reply that arrives after the kill was sent before it: acknowledged all the same.
          assert.ok(
            sameReply(got, step.reply),
            `${step.args.map(String).join(' ')} on ${show(group.acked)}: got ${String(got)}, want ${String(step.reply)}`,
          );
          group.acked = step.after;
          group.inFlight = undefined;
          group.acks++;
          acks++;
          if (killed) return;
        }
      };
      const driving = Promise.all(groups.map(drive));
      await allAcked;
      killed = true;
      killedAt = acks;
      await node.stop('SIGKILL');
      await driving;
      assert.ok(killedAt > 0, 'commands were acknowledged before the kill');

      await node.start();
      const reader = await node.client();
      let inFlightApplied = 0;
      let inFlightLost = 0;
      const wrong: string[] = [];
      for (const group of groups) {
        const [a, b] = (await reader.mgetBuffer(group.keys[0], group.keys[1])) as Array<Buffer | null>;
        const found: GroupState = [a ?? undefined, b ?? undefined];
        const same = (s: GroupState) =>
          (s[0] === undefined ? found[0] === undefined : found[0]?.equals(s[0]) === true) &&
          (s[1] === undefined ? found[1] === undefined : found[1]?.equals(s[1]) === true);
        if (same(group.acked)) {
          if (group.inFlight !== undefined && !same(group.inFlight)) inFlightLost++;
          else if (group.inFlight !== undefined) inFlightApplied++;
          continue;
        }
        if (group.inFlight !== undefined && same(group.inFlight)) {
          inFlightApplied++;
          continue;
        }
        wrong.push(
          `${group.keys[0]}: found ${show(found)}, last acknowledged ${show(group.acked)}` +
            (group.inFlight === undefined ? '' : ` or ${show(group.inFlight)} in flight`),
        );
      }
      const total = groups.reduce((n, g) => n + g.acks, 0);
      console.log(
        `${store}/${durability}: ${total} commands acknowledged over ${GROUPS} groups (${killedAt} before the kill); ` +
          `in flight at the kill: ${inFlightApplied} applied, ${inFlightLost} not; ${wrong.length} groups wrong`,
      );
      assert.deepEqual(wrong, []);
      // The restarted node takes writes again.
      assert.equal(await reader.incrby('{g0}counter', 5), 5);
    } finally {
      await node.stop('SIGKILL');
      await dir.cleanup();
    }
  });
}
