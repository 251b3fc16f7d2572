// One load run, as a library call: the optional preload phase, then the measured phase. The CLI
// (main.ts) and the tests both call runLoad(); reporting is report.ts's.

import type { Target } from './client.js';
import {
  DriverGroup,
  fetchSlotMap,
  ownersOfKeys,
  splitByShare,
  TargetPreload,
  TargetSource,
} from './cluster.js';
import { Driver, type PhaseProgress, type PhaseResult, type PhaseSpec } from './driver.js';
import { LOAD_CONNECTIONS_MAX, LOAD_PIPELINE, type LoadOptions } from './options.js';
import { Random } from './random.js';
import { RequestTemplates } from './request-writer.js';
import { KeySpace, PreloadSource, WorkloadSource, type WorkloadSpec, workloadSpec } from './workloads.js';

export type PhaseLabel = 'load' | 'run';

export interface RunHooks {
  /** A phase starts (for a progress line); `plannedOps` when it runs a fixed count. */
  onPhase?(label: PhaseLabel, driver: PhaseProgress, plannedOps: number | undefined): void;
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
  const spec = workloadSpec(options.workload, options.readRatio);
  if (options.cluster) return runOnCluster(options, hooks, random, templates, target, spec);

  let preload: PhaseResult | undefined;
  if (options.load) {
    const driver = new Driver(
      preloadSpec(options, options.connections, options.keys),
      target,
      templates,
      new PreloadSource(),
    );
    hooks.onPhase?.('load', driver, options.keys);
    preload = await driver.run();
  }

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
    runSpec(options, options.connections, options.ops, options.rate),
    target,
    templates,
    source,
  );
  hooks.onPhase?.('run', driver, options.ops);
  const run = await driver.run();
  return { options, spec, preload, run, keysAfter: space.readable };
}

/**
 * --cluster: one driver per primary CLUSTER SLOTS names, each with the keys it serves and its share
 * of the connections, operations and rate (bench/load/cluster.ts).
 */
async function runOnCluster(
  options: LoadOptions,
  hooks: RunHooks,
  random: Random,
  templates: RequestTemplates,
  seed: Target,
  spec: WorkloadSpec,
): Promise<LoadResult> {
  const map = await fetchSlotMap(seed);
  const owners = ownersOfKeys(templates, options.keys, map);
  const shares = map.targets.map((_, t) => owners.reduce((n, owner) => (owner === t ? n + 1 : n), 0));
  // A primary that serves none of the keys gets no driver (its source would never find one).
  const used = map.targets.map((_, t) => t).filter((t) => shares[t] > 0);
  const usedShares = used.map((t) => shares[t]);
  const connections = splitByShare(Math.max(options.connections, used.length), usedShares).map((n) =>
    Math.max(1, n),
  );

  let preload: PhaseResult | undefined;
  if (options.load) {
    const group = new DriverGroup(
      used.map(
        (t, i) =>
          new Driver(
            preloadSpec(options, connections[i], shares[t]),
            map.targets[t],
            templates,
            new TargetPreload(owners, t),
          ),
      ),
    );
    hooks.onPhase?.('load', group, options.keys);
    preload = await group.run();
  }

  const ops = options.ops === undefined ? undefined : splitByShare(options.ops, usedShares);
  const rates = options.rate === undefined ? undefined : splitByShare(options.rate, usedShares);
  const group = new DriverGroup(
    used.map((t, i) => {
      // Each primary's source draws from the whole run's distribution, with a seed of its own.
      const source = new WorkloadSource(
        spec,
        options.distribution,
        new Random(random.int(2 ** 32)),
        new KeySpace(options.keys, connections[i] * options.pipeline),
        options.scanLengthMax,
        options.theta,
      );
      return new Driver(
        runSpec(options, connections[i], ops?.[i], rates === undefined ? undefined : Math.max(1, rates[i])),
        map.targets[t],
        templates,
        new TargetSource(source, owners, t),
      );
    }),
  );
  hooks.onPhase?.('run', group, options.ops);
  const run = await group.run();
  return { options, spec, preload, run, keysAfter: options.keys };
}

function preloadSpec(options: LoadOptions, connections: number, keys: number): PhaseSpec {
  return {
    connections: Math.min(connections, LOAD_CONNECTIONS_MAX),
    pipeline: LOAD_PIPELINE,
    ops: keys,
    durationMs: undefined,
    rate: undefined,
    timeoutMs: options.timeoutMs,
  };
}

function runSpec(
  options: LoadOptions,
  connections: number,
  ops: number | undefined,
  rate: number | undefined,
): PhaseSpec {
  return {
    connections,
    pipeline: options.pipeline,
    ops,
    durationMs: ops === undefined ? options.durationMs : undefined,
    rate,
    timeoutMs: options.timeoutMs,
  };
}

/** The value every SET writes: printable bytes drawn from the run's seed. */
function valueBytes(random: Random, length: number): Buffer {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const value = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) value[i] = alphabet.charCodeAt(random.int(alphabet.length));
  return value;
}
