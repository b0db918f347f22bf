// Polling that never keeps a slow server busy. A poll refetches once `pollMs` have passed since the previous request
// started and, when that request took d ms, once the server has rested POLL_BACKOFF_FACTOR × d ms since it ended.
// A refresh that costs a big store 2 s is then repeated every 10 s instead of every 5 s: the dashboard keeps a server
// busy at most 1 / (1 + POLL_BACKOFF_FACTOR) = 20 % of the time, however large the store grows.

export const POLL_BACKOFF_FACTOR = 4;

/** The previous request of a polled query (`performance.now()` milliseconds). */
export interface LastRequest {
  startMs: number;
  endMs: number;
}

/** How often a polled query checks whether a refetch is due (ms): at most once a second. */
export function pollCheckMs(pollMs: number): number {
  return Math.min(pollMs, 1000);
}

/** Whether a polled query may refetch at `nowMs` (see the module comment); never while a request is in flight. */
export function pollDue(nowMs: number, last: LastRequest, pollMs: number, factor: number = POLL_BACKOFF_FACTOR): boolean {
  if (last.endMs < last.startMs) return false; // in flight
  return nowMs - last.startMs >= pollMs && nowMs - last.endMs >= factor * (last.endMs - last.startMs);
}
