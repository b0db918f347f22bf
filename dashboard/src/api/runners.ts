// What a runner is doing, from the store's worker status and the runner's own heartbeats. The store only knows
// busy/idle/unknown, so a runner that exited (or crashed) would read "Idle" forever. Runners report in their
// heartbeat stats `runner_state: "stopped"` on their last heartbeat of a clean exit, and with every heartbeat
// `heartbeat_interval` (seconds) and, when their execution strategy knows it (the ray strategy), `node`.
import type { Worker } from './types';

export type RunnerState = 'busy' | 'idle' | 'unknown' | 'stopped' | 'offline';

/** A runner is offline when its last heartbeat is older than this many heartbeat intervals. */
export const OFFLINE_AFTER_INTERVALS = 3;

/** The runner's heartbeat interval in seconds, when its heartbeats report one. */
export function heartbeatInterval(worker: Pick<Worker, 'heartbeatStats'>): number | null {
  const v = worker.heartbeatStats?.heartbeat_interval;
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : null;
}

/** The machine the runner runs on, when its heartbeats say (`node`: e.g. its Ray node's IP address). */
export function runnerNode(worker: Pick<Worker, 'heartbeatStats'>): string | null {
  const v = worker.heartbeatStats?.node;
  return typeof v === 'string' && v.trim() ? v : null;
}

/** "stopped" after a clean exit, "offline" when heartbeats stopped coming (a crashed or unreachable runner), else
 * the store's status. `nowSeconds` is the current time in epoch seconds. */
export function runnerState(worker: Pick<Worker, 'status' | 'heartbeatStats' | 'lastHeartbeatTime'>, nowSeconds: number): RunnerState {
  if (worker.heartbeatStats?.runner_state === 'stopped') return 'stopped';
  const interval = heartbeatInterval(worker);
  if (interval !== null && worker.lastHeartbeatTime !== null && nowSeconds - worker.lastHeartbeatTime > OFFLINE_AFTER_INTERVALS * interval) {
    return 'offline';
  }
  return worker.status;
}

/** One line explaining a runner state (the badge's tooltip). */
export function runnerStateHint(worker: Pick<Worker, 'heartbeatStats' | 'lastHeartbeatTime'>, state: RunnerState, nowSeconds: number): string {
  const interval = heartbeatInterval(worker);
  switch (state) {
    case 'stopped':
      return 'The runner exited cleanly (its last heartbeat said "stopped").';
    case 'offline': {
      const silent = Math.round(nowSeconds - (worker.lastHeartbeatTime ?? nowSeconds));
      return `No heartbeat for ${silent} s (expected every ${interval} s): the runner crashed or cannot reach the store.`;
    }
    case 'busy':
      return 'Working on a rollout.';
    case 'idle':
      return 'Waiting for a rollout.';
    default:
      return 'The store does not know what this runner is doing.';
  }
}
