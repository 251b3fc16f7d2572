// Requests to wait until replication is drained: the worker's whole (RequestKind.DrainReplication),
// or one sender's (RequestKind.DrainedTo: a fragment toward one peer). Each is answered when its
// senders have no write their peers have not acknowledged, or at its own deadline. The worker
// checks after whatever changes a sender: a frame from a peer (acknowledgements, resets), a peer's
// connection coming or going, a turn's run, a replica list's change.

/** Whether the senders a request waits for are drained; undefined: they are gone, and never will be. */
export type DrainedCheck = () => boolean | undefined;
/** The answer's detail byte, read when it is sent (DrainedTo: DRAINED_CONTINUOUS or 0). */
export type DrainedDetail = () => number;

interface DrainWaiter {
  timer: NodeJS.Timeout;
  drained: DrainedCheck;
  detail: DrainedDetail;
}

const NO_DETAIL: DrainedDetail = () => 0;

export class DrainWaiters {
  private readonly waiting = new Map<number, DrainWaiter>();

  constructor(
    /** Whether every sender of the worker is drained: what a request waits for unless it says otherwise. */
    private readonly drained: DrainedCheck,
    /** Sends the answer to request `reqId`: drained, or its time ran out (or its senders closed). */
    private readonly answer: (reqId: number, drained: boolean, detail: number) => void,
  ) {}

  add(
    reqId: number,
    timeoutMs: number,
    drained: DrainedCheck = this.drained,
    detail: DrainedDetail = NO_DETAIL,
  ): void {
    const now = drained();
    if (now !== false) return this.answer(reqId, now === true, detail());
    const timer = setTimeout(() => {
      this.waiting.delete(reqId);
      this.answer(reqId, false, detail());
    }, timeoutMs);
    this.waiting.set(reqId, { timer, drained, detail });
  }

  /** Answers every waiting request whose senders are drained now, or gone. */
  check(): void {
    if (this.waiting.size === 0) return;
    for (const [reqId, waiter] of this.waiting) {
      const drained = waiter.drained();
      if (drained === false) continue;
      clearTimeout(waiter.timer);
      this.waiting.delete(reqId);
      this.answer(reqId, drained === true, waiter.detail());
    }
  }

  /** The worker is closing: every request waiting is answered as not drained. */
  close(): void {
    for (const [reqId, waiter] of this.waiting) {
      clearTimeout(waiter.timer);
      this.answer(reqId, false, 0);
    }
    this.waiting.clear();
  }
}
