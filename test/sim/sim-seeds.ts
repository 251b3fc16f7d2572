// The seeds a simulator test runs: TESSERA_SIM_SEED replays one; otherwise fresh seeds each run
// (TESSERA_SIM_SEEDS of them, else the test's default), so CI keeps exploring and names a failing one.

export function simSeeds(countDefault: number): number[] {
  const one = process.env.TESSERA_SIM_SEED;
  if (one !== undefined) return [Number(one)];
  const count = Number(process.env.TESSERA_SIM_SEEDS ?? countDefault);
  const base = (Date.now() ^ (process.pid << 16)) >>> 0;
  return Array.from({ length: count }, (_, i) => (base + i * 0x9e3779b9) >>> 0 || 1);
}
