// Requests to wait until the worker's replication is drained (RequestKind.DrainReplication): each is
// answered when no sender has a write its peer has not acknowledged, or at its own deadline. The
// worker checks after whatever changes a sender: a frame from a peer (acknowledgements, resets), a
// peer's connection coming or going, a turn's run.

export class DrainWaiters {
  private readonly waiting = new Map<number, NodeJS.Timeout>();

  constructor(
    private readonly drained: () => boolean,
    /** Sends the answer to request `reqId`: drained, or its time ran out. */
    private readonly answer: (reqId: number, drained: boolean) => void,
  ) {}

  add(reqId: number, timeoutMs: number): void {
    if (this.drained()) return this.answer(reqId, true);
    const timer = setTimeout(() => {
      this.waiting.delete(reqId);
      this.answer(reqId, false);
    }, timeoutMs);
    this.waiting.set(reqId, timer);
  }

  /** Answers every waiting request if the replication is drained now. */
  check(): void {
    if (this.waiting.size === 0 || !this.drained()) return;
    for (const [reqId, timer] of this.waiting) {
      clearTimeout(timer);
      this.answer(reqId, true);
    }
    this.waiting.clear();
  }

  /** The worker is closing: every request waiting is answered as not drained. */
  close(): void {
    for (const [reqId, timer] of this.waiting) {
      clearTimeout(timer);
      this.answer(reqId, false);
    }
    this.waiting.clear();
  }
}
