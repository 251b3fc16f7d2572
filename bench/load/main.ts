// The load harness's command line: `npm run load -- --workload a --duration 10s …`
// (node .build/bench/load/main.js --help lists every flag). Progress goes to stderr, on a terminal
// only; the summary and the final line go to stdout. Exit status: 0 when no operation failed, 1 when
// one did, 2 for bad options or an unreachable server.

import { writeFile } from 'node:fs/promises';
import type { PhaseProgress } from './driver.js';
import { HELP, type LoadOptions, parseOptions, UsageError } from './options.js';
import { buildReport, finalLine, fmtInt, formatReport } from './report.js';
import { renderSvg } from './report-svg.js';
import { type PhaseLabel, runLoad } from './run.js';

/** How often the progress line is redrawn. */
const PROGRESS_INTERVAL_MS = 250;

export async function main(argv: readonly string[]): Promise<number> {
  let options: LoadOptions | undefined;
  try {
    options = parseOptions(argv, process.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`load: ${error.message}\nload: see --help\n`);
    return 2;
  }
  if (options === undefined) {
    process.stdout.write(HELP);
    return 0;
  }
  const progress = new Progress(options.quiet !== true && process.stderr.isTTY === true, options);
  let report: ReturnType<typeof buildReport>;
  try {
    const result = await runLoad(options, {
      onPhase: (label, driver, ops) => progress.phase(label, driver, ops),
    });
    report = buildReport(result);
  } catch (error) {
    progress.stop();
    process.stderr.write(`load: ${error instanceof Error ? error.message : String(error)}\n`);
    return 2;
  }
  progress.stop();
  if (!options.quiet) process.stdout.write(`${formatReport(report)}\n`);
  if (options.json !== undefined) await writeFile(options.json, `${JSON.stringify(report, null, 2)}\n`);
  if (options.svg !== undefined) await writeFile(options.svg, renderSvg(report));
  process.stdout.write(`${finalLine(report)}\n`);
  const failed = report.totals.errors + (report.preload?.totals.errors ?? 0);
  return failed === 0 ? 0 : 1;
}

/** One line on stderr, redrawn with \r; nothing when stderr is not a terminal. */
class Progress {
  private timer: NodeJS.Timeout | undefined;
  private label: PhaseLabel = 'run';
  private driver: PhaseProgress | undefined;
  private plannedOps: number | undefined;
  private lastCompleted = 0;
  private lastMs = 0;
  private rate = 0;

  constructor(
    private readonly enabled: boolean,
    private readonly options: LoadOptions,
  ) {}

  phase(label: PhaseLabel, driver: PhaseProgress, plannedOps: number | undefined): void {
    if (!this.enabled) return;
    this.clear();
    this.label = label;
    this.driver = driver;
    this.plannedOps = plannedOps;
    this.lastCompleted = 0;
    this.lastMs = 0;
    this.rate = 0;
    this.timer ??= setInterval(() => this.draw(), PROGRESS_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.clear();
  }

  private draw(): void {
    const driver = this.driver;
    if (driver === undefined) return;
    const p = driver.progress();
    if (p.elapsedMs > this.lastMs) {
      this.rate = ((p.completed - this.lastCompleted) * 1000) / (p.elapsedMs - this.lastMs);
      this.lastCompleted = p.completed;
      this.lastMs = p.elapsedMs;
    }
    const elapsed = `${(p.elapsedMs / 1000).toFixed(1)} s`;
    let where: string;
    if (this.plannedOps !== undefined) {
      const pct = ((100 * p.completed) / this.plannedOps).toFixed(0);
      where = `${pct}% (${fmtInt(p.completed)}/${fmtInt(this.plannedOps)}) in ${elapsed}`;
    } else {
      const total = ((this.options.durationMs ?? 0) / 1000).toFixed(1);
      where = `${elapsed} of ${total} s, ${fmtInt(p.completed)} ops`;
    }
    const unit = this.label === 'load' ? 'keys/s' : 'ops/s';
    const line = `[${this.label}] ${where}  ${fmtInt(this.rate)} ${unit}  errors ${p.errors}  in flight ${p.inFlight}`;
    process.stderr.write(`\r${line}\x1b[K`);
  }

  private clear(): void {
    if (this.enabled) process.stderr.write('\r\x1b[K');
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(
      `load: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 2;
  },
);
