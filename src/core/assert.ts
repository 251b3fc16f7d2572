/**
 * Guards an invariant. Always on, in production too: a failed assertion is a bug, crashes, and is
 * never caught (operating errors are TesseraErrors instead).
 */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionFailure(message);
}

export class AssertionFailure extends Error {
  override name = 'AssertionFailure';
}
