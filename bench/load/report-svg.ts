// The run as a chart, hand-written SVG (no dependency), viewable in a browser:
//
//   ┌───────────────────────────────────────────────┐
//   │ title: workload, target, shape                │
//   │ latency (ms) by percentile, one line per op,  │  x: log10(1 / (1 - p)), 0 → 99.999 %
//   │ legend with each op's p99                     │
//   ├───────────────────────────────────────────────┤
//   │ throughput (ops/s) per second, errors in red  │  x: seconds since the start
//   └───────────────────────────────────────────────┘

import { CURVE_PERCENTILE_MAX } from './histogram.js';
import { fmtInt, fmtMs, type LoadReport } from './report.js';

const WIDTH = 960;
const HEIGHT = 760;
const LEFT = 80;
const RIGHT = 200;
const LATENCY_TOP = 70;
const LATENCY_BOTTOM = 400;
const SERIES_TOP = 480;
const SERIES_BOTTOM = 700;
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#17becf'];
const ALL_COLOR = '#333333';
const ERROR_COLOR = '#d62728';

export function renderSvg(r: LoadReport): string {
  const out: string[] = [];
  out.push('<?xml version="1.0" encoding="UTF-8"?>');
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" ` +
      `viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
  );
  const c = r.config;
  const shape = r.mode === 'open' ? `open loop ${c.rate} ops/s` : 'closed loop';
  const title =
    `tessera-load: workload ${r.workload.name}, ${r.workload.distribution}, ${c.connections} conns × ` +
    `pipeline ${c.pipeline}, ${shape}, ${c.host}:${c.port}`;
  out.push(`<title>${esc(title)}</title>`);
  out.push(`<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`);
  out.push(text(WIDTH / 2, 24, title, 'middle', 15, 'bold'));
  out.push(
    text(
      WIDTH / 2,
      44,
      `${fmtInt(r.totals.ops)} ops in ${(r.elapsedMs / 1000).toFixed(1)} s, ` +
        `${fmtInt(r.totals.opsPerSec)} ops/s, ${r.totals.errors} errors`,
      'middle',
    ),
  );
  latencyChart(r, out);
  seriesChart(r, out);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function latencyChart(r: LoadReport, out: string[]): void {
  const decades = Math.log10(100 / (100 - CURVE_PERCENTILE_MAX));
  const names = Object.keys(r.curves);
  let maxUs = 0;
  for (const name of names)
    for (const p of r.curves[name]) if (p.percentile <= CURVE_PERCENTILE_MAX) maxUs = Math.max(maxUs, p.us);
  const yMax = niceMax(maxUs / 1000);
  const x = (percentile: number) =>
    LEFT + ((WIDTH - LEFT - RIGHT) * Math.log10(100 / (100 - percentile))) / decades;
  const y = (ms: number) => LATENCY_BOTTOM - ((LATENCY_BOTTOM - LATENCY_TOP) * ms) / yMax;
  out.push('<g class="latency">');
  out.push(frame(LATENCY_TOP, LATENCY_BOTTOM));
  for (const p of [0, 90, 99, 99.9, 99.99, 99.999]) {
    out.push(line(x(p), LATENCY_TOP, x(p), LATENCY_BOTTOM, '#e0e0e0'));
    out.push(text(x(p), LATENCY_BOTTOM + 16, `${p}%`, 'middle'));
  }
  yTicks(yMax, y, out);
  out.push(
    text((LEFT + WIDTH - RIGHT) / 2, LATENCY_BOTTOM + 34, 'percentile (log scale of 1/(1-p))', 'middle'),
  );
  out.push(vertical(LATENCY_TOP, LATENCY_BOTTOM, 'latency (ms)'));
  names.forEach((name, i) => {
    const color = name === 'all' ? ALL_COLOR : COLORS[i % COLORS.length];
    const points = r.curves[name]
      .filter((p) => p.percentile <= CURVE_PERCENTILE_MAX)
      .map((p) => `${x(p.percentile).toFixed(1)},${y(p.us / 1000).toFixed(1)}`)
      .join(' ');
    const dash = name === 'all' ? ' stroke-dasharray="6 3"' : '';
    out.push(
      `<polyline data-op="${esc(name)}" fill="none" stroke="${color}" stroke-width="2"${dash} points="${points}"/>`,
    );
    const op = name === 'all' ? r.all : r.ops[name];
    const ly = LATENCY_TOP + 10 + i * 36;
    out.push(line(WIDTH - RIGHT + 16, ly, WIDTH - RIGHT + 40, ly, color, 2));
    out.push(text(WIDTH - RIGHT + 46, ly + 4, name, 'start', 12, 'bold'));
    if (op !== undefined) {
      out.push(
        text(
          WIDTH - RIGHT + 46,
          ly + 18,
          `p99 ${fmtMs(op.latencyUs.p99)} / max ${fmtMs(op.latencyUs.max)} ms`,
          'start',
          10,
        ),
      );
    }
  });
  out.push('</g>');
}

function seriesChart(r: LoadReport, out: string[]): void {
  const { ops, errors, intervalMs } = r.series;
  // Bucket i spans [i, i+1) intervals, the last one only up to the end of the run: it is drawn at its
  // own rate when it covers half an interval or more (else the drain of the last replies would read
  // as a collapse, or a spike).
  const spans: Array<{ fromS: number; toS: number }> = [];
  const buckets = Math.max(ops.length, errors.length, 1);
  for (let i = 0; i < buckets; i++) {
    const fromMs = i * intervalMs;
    const toMs = Math.min((i + 1) * intervalMs, Math.max(r.elapsedMs, fromMs + 1));
    if (i > 0 && toMs - fromMs < intervalMs / 2) break;
    spans.push({ fromS: fromMs / 1000, toS: toMs / 1000 });
  }
  const rate = (values: number[], i: number) => (values[i] ?? 0) / (spans[i].toS - spans[i].fromS);
  let maxRate = 0;
  for (let i = 0; i < spans.length; i++) maxRate = Math.max(maxRate, rate(ops, i), rate(errors, i));
  const yMax = niceMax(maxRate * 1.05);
  const seconds = spans[spans.length - 1].toS;
  const x = (s: number) => LEFT + ((WIDTH - LEFT - RIGHT) * s) / seconds;
  const y = (v: number) => SERIES_BOTTOM - ((SERIES_BOTTOM - SERIES_TOP) * v) / yMax;
  out.push('<g class="throughput">');
  out.push(frame(SERIES_TOP, SERIES_BOTTOM));
  const step = niceStep(seconds, 10);
  for (let s = 0; s <= seconds + 1e-9; s += step) {
    out.push(text(x(s), SERIES_BOTTOM + 16, `${+s.toFixed(3)}`, 'middle'));
  }
  yTicks(yMax, y, out);
  out.push(text((LEFT + WIDTH - RIGHT) / 2, SERIES_BOTTOM + 34, 'time (s), per-second buckets', 'middle'));
  out.push(vertical(SERIES_TOP, SERIES_BOTTOM, 'throughput (ops/s)'));
  const steps = (values: number[]) => {
    const pts: string[] = [];
    for (let i = 0; i < spans.length; i++) {
      const v = y(rate(values, i)).toFixed(1);
      pts.push(`${x(spans[i].fromS).toFixed(1)},${v}`, `${x(spans[i].toS).toFixed(1)},${v}`);
    }
    return pts.join(' ');
  };
  out.push(
    `<polyline data-series="ops" fill="none" stroke="${COLORS[0]}" stroke-width="2" points="${steps(ops)}"/>`,
  );
  if (r.totals.errors > 0) {
    out.push(
      `<polyline data-series="errors" fill="none" stroke="${ERROR_COLOR}" stroke-width="2" points="${steps(errors)}"/>`,
    );
  }
  out.push(line(WIDTH - RIGHT + 16, SERIES_TOP + 10, WIDTH - RIGHT + 40, SERIES_TOP + 10, COLORS[0], 2));
  out.push(text(WIDTH - RIGHT + 46, SERIES_TOP + 14, 'ops/s', 'start'));
  out.push(line(WIDTH - RIGHT + 16, SERIES_TOP + 30, WIDTH - RIGHT + 40, SERIES_TOP + 30, ERROR_COLOR, 2));
  out.push(text(WIDTH - RIGHT + 46, SERIES_TOP + 34, 'errors/s', 'start'));
  out.push('</g>');
}

function frame(top: number, bottom: number): string {
  return `<rect x="${LEFT}" y="${top}" width="${WIDTH - LEFT - RIGHT}" height="${bottom - top}" fill="none" stroke="#888888"/>`;
}

function yTicks(yMax: number, y: (v: number) => number, out: string[]): void {
  const step = niceStep(yMax, 5);
  for (let v = 0; v <= yMax + 1e-9; v += step) {
    const at = y(v);
    if (v > 0) out.push(line(LEFT, at, WIDTH - RIGHT, at, '#eeeeee'));
    out.push(text(LEFT - 6, at + 4, tickLabel(v), 'end'));
  }
}

function vertical(top: number, bottom: number, label: string): string {
  const cy = (top + bottom) / 2;
  return `<text x="20" y="${cy}" text-anchor="middle" transform="rotate(-90 20 ${cy})">${esc(label)}</text>`;
}

function line(x1: number, y1: number, x2: number, y2: number, color: string, width = 1): string {
  return `<line x1="${x1.toFixed(1)}" y1="${y1.toFixed(1)}" x2="${x2.toFixed(1)}" y2="${y2.toFixed(1)}" stroke="${color}" stroke-width="${width}"/>`;
}

function text(x: number, y: number, content: string, anchor: string, size = 12, weight = 'normal'): string {
  return (
    `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" text-anchor="${anchor}" font-size="${size}" ` +
    `font-weight="${weight}">${esc(content)}</text>`
  );
}

/** A round upper bound for an axis: 1, 2 or 5 × 10^k above `max`. */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const step = niceStep(max, 5);
  return Math.ceil(max / step - 1e-9) * step || step;
}

/** A round tick step giving about `ticks` ticks up to `max`. */
export function niceStep(max: number, ticks: number): number {
  if (!(max > 0)) return 1;
  const raw = max / ticks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / magnitude;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * magnitude;
}

function tickLabel(v: number): string {
  if (v >= 1000) return fmtInt(v);
  return `${+v.toPrecision(4)}`;
}

/** Escapes text for XML content and attribute values. */
export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}
