// One load run, as a library call: the optional preload phase, then the measured phase. The CLI
// (main.ts) and the tests both call runLoad(); reporting is report.ts's.

import { Driver, type PhaseResult } from './driver.js';
import { LOAD_CONNECTIONS_MAX, LOAD_PIPELINE, type LoadOptions } from './options.js';
import { Random } from './random.js';
import { RequestTemplates } from './request-writer.js';
import { KeySpace, PreloadSource, WorkloadSource, type WorkloadSpec, workloadSpec } from './workloads.js';

export type PhaseLabel = 'load' | 'run';

export interface RunHooks {
  /** A phase starts (for a progress line); `plannedOps` when it runs a fixed count. */
  onPhase?(label: PhaseLabel, driver: Driver, plannedOps: number | undefined): void;
}

export interface LoadResult {
  options: LoadOptions;
  spec: WorkloadSpec;
  preload: PhaseResult | undefined;
  run: PhaseResult;
  /** Keys that exist after the run (loaded or assumed, plus acknowledged inserts). */
  keysAfter: number;
}

/** Runs the preload (with --load) and the measured phase against `options`' server. */
export async function runLoad(options: LoadOptions, hooks: RunHooks = {}): Promise<LoadResult> {
  const random = new Random(options.seed);
  const templates = new RequestTemplates(options.keyPrefix, valueBytes(random, options.valueBytes));
  const target = { host: options.host, port: options.port, password: options.password };

  let preload: PhaseResult | undefined;
  if (options.load) {
    const driver = new Driver(
      {
        connections: Math.min(options.connections, LOAD_CONNECTIONS_MAX),
        pipeline: LOAD_PIPELINE,
        ops: options.keys,
        durationMs: undefined,
        rate: undefined,
        timeoutMs: options.timeoutMs,
      },
      target,
      templates,
      new PreloadSource(),
    );
    hooks.onPhase?.('load', driver, options.keys);
    preload = await driver.run();
  }

  const spec = workloadSpec(options.workload, options.readRatio);
  // Every slot may hold an insert at once.
  const space = new KeySpace(options.keys, options.connections * options.pipeline);
  const source = new WorkloadSource(
    spec,
    options.distribution,
    random,
    space,
    options.scanLengthMax,
    options.theta,
  );
  const driver = new Driver(
    {
      connections: options.connections,
      pipeline: options.pipeline,
      ops: options.ops,
      durationMs: options.durationMs,
      rate: options.rate,
      timeoutMs: options.timeoutMs,
    },
    target,
    templates,
    source,
  );
  hooks.onPhase?.('run', driver, options.ops);
  const run = await driver.run();
  return { options, spec, preload, run, keysAfter: space.readable };
}

/** The value every SET writes: printable bytes drawn from the run's seed. */
function valueBytes(random: Random, length: number): Buffer {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const value = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) value[i] = alphabet.charCodeAt(random.int(alphabet.length));
  return value;
}
