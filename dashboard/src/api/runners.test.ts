import { describe, expect, it } from 'vitest';
import { normalizeWorker } from './normalize';
import { heartbeatInterval, runnerNode, runnerState, runnerStateHint } from './runners';

const worker = (status: string, stats: Record<string, unknown> | null, lastHeartbeat: number | null) =>
  normalizeWorker({ worker_id: 'Worker-0', status, heartbeat_stats: stats, last_heartbeat_time: lastHeartbeat });

describe('runner state', () => {
  const now = 1000;

  it('a runner that said "stopped" on its last heartbeat is stopped, whatever the store says', () => {
    const w = worker('idle', { runner_state: 'stopped', heartbeat_interval: 10 }, now - 3600);
    expect(runnerState(w, now)).toBe('stopped');
    expect(runnerStateHint(w, 'stopped', now)).toContain('exited cleanly');
  });

  it('a runner silent for more than 3 heartbeat intervals is offline (it crashed)', () => {
    expect(runnerState(worker('idle', { heartbeat_interval: 10 }, now - 31), now)).toBe('offline');
    expect(runnerState(worker('busy', { heartbeat_interval: 10 }, now - 31), now)).toBe('offline');
    const w = worker('idle', { heartbeat_interval: 10 }, now - 120);
    expect(runnerStateHint(w, runnerState(w, now), now)).toBe('No heartbeat for 120 s (expected every 10 s): the runner crashed or cannot reach the store.');
  });

  it('otherwise the store\'s status', () => {
    expect(runnerState(worker('idle', { heartbeat_interval: 10 }, now - 29), now)).toBe('idle');
    expect(runnerState(worker('busy', { heartbeat_interval: 10, runner_state: 'running' }, now - 1), now)).toBe('busy');
    // Without a reported interval there is no telling how late a heartbeat is.
    expect(runnerState(worker('idle', { cpu_percent: 3 }, now - 99999), now)).toBe('idle');
    expect(runnerState(worker('unknown', null, null), now)).toBe('unknown');
    expect(runnerState(worker('idle', { heartbeat_interval: 10 }, null), now)).toBe('idle');
  });

  it('reads the interval only when it is a positive number', () => {
    expect(heartbeatInterval(worker('idle', { heartbeat_interval: 2.5 }, 0))).toBe(2.5);
    for (const bad of [0, -1, '10', null, Number.NaN]) expect(heartbeatInterval(worker('idle', { heartbeat_interval: bad }, 0))).toBeNull();
    expect(heartbeatInterval(worker('idle', null, 0))).toBeNull();
  });
});

describe('runner node', () => {
  it('is the node its heartbeats report, else none', () => {
    expect(runnerNode(worker('idle', { node: '10.0.0.12', heartbeat_interval: 10 }, 1))).toBe('10.0.0.12');
    expect(runnerNode(worker('idle', { heartbeat_interval: 10 }, 1))).toBeNull();
    expect(runnerNode(worker('idle', { node: '' }, 1))).toBeNull();
    expect(runnerNode(worker('unknown', null, null))).toBeNull();
  });
});
