// Response normalisation.
import type { Attempt, Paginated, ResourcesUpdate, Rollout, Span, Worker } from './types';

export function snakeToCamel(key: string): string {
  return key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

export function camelizeKeys(value: unknown, keep: ReadonlySet<string> = new Set()): unknown {
  if (Array.isArray(value)) return value.map((v) => camelizeKeys(v, keep));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      if (keep.has(k)) out[snakeToCamel(k)] = v;
      else out[snakeToCamel(k)] = camelizeKeys(v);
    }
    return out;
  }
  return value;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const obj = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

export function normalizeAttempt(raw: unknown): Attempt {
  const r = obj(raw) ?? {};
  const startTime = num(r.start_time ?? r.startTime);
  const heartbeat = num(r.last_heartbeat_time ?? r.lastHeartbeatTime ?? r.lastHeartBeatTime);
  return {
    rolloutId: String(r.rollout_id ?? r.rolloutId ?? ''),
    attemptId: String(r.attempt_id ?? r.attemptId ?? ''),
    sequenceId: num(r.sequence_id ?? r.sequenceId) ?? 0,
    startTime,
    endTime: num(r.end_time ?? r.endTime),
    status: (str(r.status) ?? 'preparing') as Attempt['status'],
    workerId: str(r.worker_id ?? r.workerId),
    lastHeartbeatTime: heartbeat ?? startTime ?? null,
    metadata: obj(r.metadata),
  };
}

export function normalizeRollout(raw: unknown): Rollout {
  const r = obj(raw) ?? {};
  const attemptRaw = r.attempt;
  return {
    rolloutId: String(r.rollout_id ?? r.rolloutId ?? ''),
    input: r.input,
    startTime: num(r.start_time ?? r.startTime),
    endTime: num(r.end_time ?? r.endTime),
    mode: (str(r.mode) as Rollout['mode']) ?? null,
    resourcesId: str(r.resources_id ?? r.resourcesId),
    status: (str(r.status) ?? 'queuing') as Rollout['status'],
    config: obj(camelizeKeys(r.config)),
    metadata: obj(r.metadata),
    attempt: attemptRaw && typeof attemptRaw === 'object' ? normalizeAttempt(attemptRaw) : null,
  };
}

const SPAN_VERBATIM = new Set(['attributes', 'context', 'parent', 'resource']);

export function normalizeSpan(raw: unknown): Span {
  const r = obj(raw) ?? {};
  const camel = camelizeKeys(r, SPAN_VERBATIM) as Record<string, unknown>;
  const status = obj(r.status) ?? {};
  return {
    ...camel,
    rolloutId: String(r.rollout_id ?? ''),
    attemptId: String(r.attempt_id ?? ''),
    sequenceId: num(r.sequence_id) ?? 0,
    traceId: String(r.trace_id ?? ''),
    spanId: String(r.span_id ?? ''),
    parentId: str(r.parent_id),
    name: String(r.name ?? ''),
    status: {
      status_code: (str(status.status_code) ?? str(status.statusCode) ?? 'UNSET') as Span['status']['status_code'],
      description: str(status.description),
    },
    attributes: obj(r.attributes) ?? {},
    events: Array.isArray(r.events) ? r.events : [],
    links: Array.isArray(r.links) ? r.links : [],
    startTime: num(r.start_time),
    endTime: num(r.end_time),
    context: r.context ?? null,
    parent: r.parent ?? null,
    resource: r.resource ?? null,
  };
}

export function normalizeResources(raw: unknown): ResourcesUpdate {
  const r = obj(raw) ?? {};
  return {
    resourcesId: String(r.resources_id ?? ''),
    version: num(r.version) ?? 0,
    createTime: num(r.create_time),
    updateTime: num(r.update_time),
    resources: obj(r.resources) ?? {},
  };
}

export function normalizeWorker(raw: unknown): Worker {
  const r = obj(raw) ?? {};
  return {
    workerId: String(r.worker_id ?? ''),
    status: (str(r.status) ?? 'unknown') as Worker['status'],
    heartbeatStats: obj(r.heartbeat_stats),
    lastHeartbeatTime: num(r.last_heartbeat_time),
    lastDequeueTime: num(r.last_dequeue_time),
    lastBusyTime: num(r.last_busy_time),
    lastIdleTime: num(r.last_idle_time),
    currentRolloutId: str(r.current_rollout_id),
    currentAttemptId: str(r.current_attempt_id),
  };
}

export function normalizePaginated<T>(raw: unknown, item: (v: unknown) => T): Paginated<T> {
  const r = obj(raw);
  if (!r) throw new Error('Invalid paginated response: expected an object');
  const items = Array.isArray(r.items) ? r.items.map(item) : [];
  return {
    items,
    limit: num(r.limit) ?? items.length,
    offset: num(r.offset) ?? 0,
    total: num(r.total) ?? items.length,
  };
}
