// The power-loss simulator: records a writer on the FUSE recorder (fuse-recorder.ts), kills it with
// SIGKILL, then builds crash states from the recording (crash-states.ts) — nothing unsynced kept,
// everything kept, in-order prefixes, random subsets of unsynced pages, torn sectors — restarts on
// each (state-checker.ts) and checks what it serves against what was acknowledged (history.ts).
//
// A scenario is seeded: the seed fixes the workload, where the writer is killed and every crash
// state (each state has a seed of its own, derived from the scenario's). The kill lands wherever
// the writer's real timing has taken it, so a failing scenario keeps its recording (the op log and
// the history) and names the state's seed; `--replay DIR --state-seed N` checks that one state
// again, exactly.
//
//   node .build/test/crash/power-loss.js --subject node --store lmdb --durability stable \
//     --seed 1 --states 1000 [--recordings 10] [--writes 20000] [--keys 2000] [--keep]
//   node .build/test/crash/power-loss.js --replay DIR --state-seed N

import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import { killedAfterTests } from '../integration/children.js';
import { seededFractions } from '../unit/fixtures/xorshift32.js';
import { type CrashChoice, CrashStateBuilder, writeCrashState } from './crash-states.js';
import { startRecorder } from './fuse-recorder.js';
import { checkReadback, keysOf, type Violation, type WriteRecord, workload } from './history.js';
import { type Op, readOpLog } from './op-log.js';
import type { CheckAnswer, CheckJob } from './state-checker.js';

export type Subject = 'node' | 'raw-lmdb-writemap';
export type Durability = 'memory' | 'store' | 'stable';

export interface Scenario {
  subject: Subject;
  /** The node's store (unused by the raw subject). */
  store: StoreKind;
  durability: Durability;
  seed: number;
  keys: number;
  writes: number;
  states: number;
}

export interface StateOutcome {
  stateSeed: number;
  k: number;
  choice: CrashChoice;
  verdict: 'sound' | 'refused' | 'crashed' | 'violations';
  detail: string;
  violations: Violation[];
}

export interface ScenarioReport {
  scenario: Scenario;
  ops: number;
  acked: number;
  stableAcked: number;
  outcomes: StateOutcome[];
  /** Where the recording is kept for replay (only when a state failed, or when asked to keep it). */
  recordingDir?: string;
}

/** A writer that has not been killed by then is killed anyway: bounds a scenario on a slow machine. */
const WRITER_RUN_MS_MAX = 60_000;
/** One crash state's check: a node start, a read of every key and a close. */
const CHECK_MS_MAX = 60_000;
/** Crash points after the kill (all of the recording, the writeback at unmount included). */
const FINAL_STATE_SHARE = 0.2;

const here = path.dirname(fileURLToPath(import.meta.url));
const script = (name: string) => path.join(here, name);

interface Recording {
  ops: Op[];
  history: WriteRecord[];
}

/** Runs the writer on the recorder until its seeded kill point; returns the op log and the history. */
async function record(scenario: Scenario, dir: string): Promise<Recording> {
  const backing = path.join(dir, 'backing');
  const mount = path.join(dir, 'mount');
  const logFile = path.join(dir, 'ops.log');
  fs.mkdirSync(backing);
  fs.mkdirSync(mount);
  const recorder = await startRecorder({ backing, mount, log: logFile });
  let history: WriteRecord[];
  try {
    history = await runWriter(scenario, path.join(mount, 'data'));
  } finally {
    await recorder.stop();
  }
  const ops = readOpLog(fs.readFileSync(logFile));
  fs.writeFileSync(path.join(dir, 'history.json'), JSON.stringify({ scenario, history }, bigintText));
  fs.rmSync(backing, { recursive: true, force: true });
  return { ops, history };
}

function writerCommand(scenario: Scenario, dataDir: string): string[] {
  const load = [String(scenario.seed), String(scenario.keys), String(scenario.writes)];
  if (scenario.subject === 'node')
    return [script('node-writer.js'), scenario.store, dataDir, scenario.durability, ...load];
  return [script('raw-lmdb-writer.js'), dataDir, ...load];
}

async function runWriter(scenario: Scenario, dataDir: string): Promise<WriteRecord[]> {
  const random = seededFractions(scenario.seed ^ 0x5eed);
  const killAfterAcks = Math.floor(scenario.writes * (0.3 + 0.6 * random()));
  const history = workload(scenario.seed, scenario.keys, scenario.writes);
  const child = killedAfterTests(
    spawn(process.execPath, writerCommand(scenario, dataDir), {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const timer = setTimeout(() => child.kill('SIGKILL'), WRITER_RUN_MS_MAX);
  let acks = 0;
  const stableEveryAck = scenario.subject === 'node' && scenario.durability === 'stable';
  for await (const line of createInterface({ input: child.stdout! })) {
    const [word, seqText, nsText] = line.split(' ');
    // The writer is killed mid-run: its last line may be torn, and what it reported is not known.
    if (nsText === undefined || !/^\d+$/.test(nsText)) continue;
    if (word === 'ack') {
      const w = history[Number(seqText) - 1];
      w.ackNs = BigInt(nsText);
      if (stableEveryAck) w.stableNs = w.ackNs;
      if (++acks >= killAfterAcks) child.kill('SIGKILL');
    } else if (word === 'stable') {
      // The raw writer's sync covers every write up to seq that was committed before it.
      for (let i = 0; i < Number(seqText); i++) {
        if (history[i].ackNs !== undefined && history[i].stableNs === undefined)
          history[i].stableNs = BigInt(nsText);
      }
    }
  }
  clearTimeout(timer);
  child.kill('SIGKILL');
  await exited;
  return history;
}

/** A state's crash point and choice, all from its seed. */
function stateOf(stateSeed: number, opCount: number): { k: number; choice: CrashChoice } {
  const random = seededFractions(stateSeed);
  const k = random() < FINAL_STATE_SHARE ? opCount : Math.floor(random() * (opCount + 1));
  const pick = random();
  const seed = Math.floor(random() * 2 ** 31);
  let choice: CrashChoice;
  if (pick < 0.15) choice = { kind: 'none' };
  else if (pick < 0.3) choice = { kind: 'all' };
  else if (pick < 0.5) choice = { kind: 'prefix-share', share: random() };
  else if (pick < 0.8) choice = { kind: 'subset', seed };
  else choice = { kind: 'subset-torn', seed };
  return { k, choice };
}

const stateSeedOf = (scenarioSeed: number, index: number): number =>
  (Math.imul(scenarioSeed, 0x9e3779b1) + Math.imul(index + 1, 0x85ebca6b)) >>> 0;

/** Starts on each crash state in turn (one checker process, replaced when a state takes it down). */
class Checker {
  #child: ChildProcess | undefined;
  #lines: AsyncIterator<string> | undefined;
  /** Settles with how the current checker process ended. */
  #exited: Promise<string> = Promise.resolve('');

  async check(job: CheckJob): Promise<CheckAnswer | { crashed: string }> {
    const child = this.#start();
    const exited = this.#exited;
    child.stdin!.write(`${JSON.stringify(job)}\n`);
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      this.#lines!.next().then((r) => (r.done ? undefined : (JSON.parse(r.value) as CheckAnswer))),
      exited.then((how) => ({ crashed: `the checker died (${how})` })),
      new Promise<{ crashed: string }>((resolve) => {
        timer = setTimeout(() => resolve({ crashed: `no answer within ${CHECK_MS_MAX} ms` }), CHECK_MS_MAX);
      }),
    ]);
    clearTimeout(timer);
    if (outcome === undefined || 'crashed' in outcome) {
      this.close();
      return outcome ?? { crashed: 'the checker closed its output' };
    }
    return outcome;
  }

  #start(): ChildProcess {
    if (this.#child !== undefined) return this.#child;
    // LMDB_RESTORE=safe: open each env as after a reboot, at its newest flushed state (state-checker.ts).
    const child = killedAfterTests(
      spawn(process.execPath, [script('state-checker.js')], {
        stdio: ['pipe', 'pipe', 'inherit'],
        env: { ...process.env, LMDB_RESTORE: 'safe' },
      }),
    );
    this.#child = child;
    this.#exited = new Promise<string>((resolve) =>
      child.once('exit', (code, signal) => resolve(`exit ${signal ?? code}`)),
    );
    this.#lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    return child;
  }

  close(): void {
    this.#child?.stdin?.end();
    this.#child?.kill('SIGKILL');
    this.#child = undefined;
    this.#lines = undefined;
  }
}

/** Builds, starts on and checks one crash state. */
async function checkState(
  scenario: Scenario,
  recording: Recording,
  builder: CrashStateBuilder,
  checker: Checker,
  stateSeed: number,
  stateDir: string,
): Promise<StateOutcome> {
  const { ops, history } = recording;
  const { k, choice } = stateOf(stateSeed, ops.length);
  fs.rmSync(stateDir, { recursive: true, force: true });
  writeCrashState(builder.at(k, choice), stateDir);
  const keys = keysOf(history);
  const dir = path.join(stateDir, 'data');
  let answer: CheckAnswer | { crashed: string };
  try {
    answer = await checker.check({ subject: scenario.subject, store: scenario.store, dir, keys });
  } finally {
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
  const base = { stateSeed, k, choice, violations: [] as Violation[] };
  if ('crashed' in answer) return { ...base, verdict: 'crashed', detail: answer.crashed };
  if ('refused' in answer) return { ...base, verdict: 'refused', detail: answer.refused };
  const crashNs = k < ops.length ? ops[k].atNs : BigInt(Number.MAX_SAFE_INTEGER) ** 2n;
  const readback = new Map(keys.map((key, i) => [key, answer.values[i]]));
  const violations = checkReadback(history, crashNs, readback);
  if (violations.length === 0) return { ...base, verdict: 'sound', detail: '' };
  const first = violations[0];
  return {
    ...base,
    verdict: 'violations',
    detail: `${violations.length} keys wrong, e.g. ${first.key}: ${first.reason}`,
    violations,
  };
}

/** Runs one scenario: a recording, then `states` crash states of it. */
export async function runScenario(
  scenario: Scenario,
  options: { keep?: boolean } = {},
): Promise<ScenarioReport> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-power-loss-'));
  const checker = new Checker();
  let failed = false;
  try {
    const recording = await record(scenario, dir);
    if (!recording.history.some((w) => w.ackNs !== undefined))
      throw new Error(`the writer acknowledged no write before it was killed (recording in ${dir})`);
    const builder = new CrashStateBuilder(recording.ops);
    const seeds = Array.from({ length: scenario.states }, (_, i) => stateSeedOf(scenario.seed, i));
    // In crash-point order: the builder walks the log forward once.
    seeds.sort((a, b) => stateOf(a, recording.ops.length).k - stateOf(b, recording.ops.length).k);
    const outcomes: StateOutcome[] = [];
    for (const stateSeed of seeds) {
      const outcome = await checkState(
        scenario,
        recording,
        builder,
        checker,
        stateSeed,
        // A path of its own per state: lmdb-js keeps an env open per path in a process, and a
        // state at a path the checker used before must not meet what it left there.
        path.join(dir, `state-${stateSeed}`),
      );
      if (outcome.verdict !== 'sound') failed = true;
      outcomes.push(outcome);
    }
    const acked = recording.history.filter((w) => w.ackNs !== undefined).length;
    const stableAcked = recording.history.filter((w) => w.stableNs !== undefined).length;
    const keep = failed || options.keep === true;
    return {
      scenario,
      ops: recording.ops.length,
      acked,
      stableAcked,
      outcomes,
      recordingDir: keep ? dir : undefined,
    };
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    checker.close();
    if (!failed && options.keep !== true) fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Checks one state of a kept recording again. */
export async function replayState(dir: string, stateSeed: number): Promise<StateOutcome> {
  const { scenario, history } = JSON.parse(
    fs.readFileSync(path.join(dir, 'history.json'), 'utf8'),
    bigintValue,
  ) as {
    scenario: Scenario;
    history: WriteRecord[];
  };
  const recording = { ops: readOpLog(fs.readFileSync(path.join(dir, 'ops.log'))), history };
  const checker = new Checker();
  try {
    return await checkState(
      scenario,
      recording,
      new CrashStateBuilder(recording.ops),
      checker,
      stateSeed,
      path.join(dir, `replay-${stateSeed}`),
    );
  } finally {
    checker.close();
  }
}

/** One line per scenario, and one per failed state with how to replay it. */
export function describeReport(report: ScenarioReport): string {
  const { scenario: s, outcomes } = report;
  const count = (verdict: StateOutcome['verdict']) => outcomes.filter((o) => o.verdict === verdict).length;
  const name = s.subject === 'node' ? `${s.store}/${s.durability}` : s.subject;
  const lines = [
    `${name} seed ${s.seed}: ${outcomes.length} crash states of ${report.ops} ops (${report.acked} writes acknowledged, ` +
      `${report.stableAcked} stable): ${count('sound')} sound, ${count('refused')} refused to start, ` +
      `${count('crashed')} crashed, ${count('violations')} served wrong or lost data`,
  ];
  for (const o of outcomes) {
    if (o.verdict === 'sound') continue;
    lines.push(
      `  state seed ${o.stateSeed} (crash before op ${o.k}, ${JSON.stringify(o.choice)}): ${o.verdict}: ${o.detail.slice(0, 300)}` +
        (report.recordingDir === undefined
          ? ''
          : `\n    replay: node .build/test/crash/power-loss.js --replay ${report.recordingDir} --state-seed ${o.stateSeed}`),
    );
  }
  return lines.join('\n');
}

function bigintText(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? `${value}n` : value;
}

function bigintValue(_key: string, value: unknown): unknown {
  return typeof value === 'string' && /^\d+n$/.test(value) ? BigInt(value.slice(0, -1)) : value;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      subject: { type: 'string', default: 'node' },
      store: { type: 'string', default: 'lmdb' },
      durability: { type: 'string', default: 'stable' },
      seed: { type: 'string', default: '1' },
      states: { type: 'string', default: '100' },
      writes: { type: 'string', default: '20000' },
      keys: { type: 'string', default: '2000' },
      recordings: { type: 'string', default: '1' },
      keep: { type: 'boolean', default: false },
      replay: { type: 'string' },
      'state-seed': { type: 'string' },
    },
  });
  if (values.replay !== undefined) {
    const outcome = await replayState(values.replay, Number(values['state-seed']));
    process.stdout.write(
      `${JSON.stringify({ ...outcome, violations: outcome.violations.slice(0, 20) }, null, 2)}\n`,
    );
    process.exitCode = outcome.verdict === 'sound' ? 0 : 1;
    return;
  }
  // Several recordings (seeds seed, seed+1, …) share the states: kill points and timings vary.
  const recordings = Number(values.recordings);
  const perRecording = Math.ceil(Number(values.states) / recordings);
  let sound = 0;
  let total = 0;
  for (let r = 0; r < recordings; r++) {
    const report = await runScenario(
      {
        subject: values.subject as Subject,
        store: values.store as StoreKind,
        durability: values.durability as Durability,
        seed: Number(values.seed) + r,
        states: perRecording,
        writes: Number(values.writes),
        keys: Number(values.keys),
      },
      { keep: values.keep },
    );
    process.stdout.write(`${describeReport(report)}\n`);
    total += report.outcomes.length;
    sound += report.outcomes.filter((o) => o.verdict === 'sound').length;
  }
  process.stdout.write(`total: ${total} crash states, ${sound} sound, ${total - sound} not\n`);
  process.exitCode = sound === total ? 0 : 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
