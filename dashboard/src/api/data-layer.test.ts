import { beforeEach, describe, expect, it } from 'vitest';
import { ApiClient, ApiError, getErrorDescriptor } from './client';
import { formatDateTime, formatDuration, formatRelativeTime, formatStatusLabel } from './format';
import { attributeEntries, buildWaterfall, fetchStatusCounts } from './insights';
import { buildLearningCurve, fetchRewardHistory, fetchRewardsOf, formatReward, parseJsonl, type RewardRow } from './training';
import { normalizePaginated, normalizeRollout, normalizeSpan, normalizeWorker } from './normalize';
import { POLL_BACKOFF_FACTOR, pollCheckMs, pollDue } from './polling';
import {
  fetchRollouts,
  fetchSpans,
  pagination,
  resetCapabilities,
  selectResourcesArgs,
  selectRolloutsArgs,
  selectSpansArgs,
  selectWorkersArgs,
  sortLocally,
  spansParams,
} from './queries';
import type { Span } from './types';
import { buildQuery, resolveApiUrl } from './url';

const rawRollout = (id: string, extra: Record<string, unknown> = {}) => ({
  rollout_id: id,
  input: { q: id },
  start_time: 100,
  end_time: null,
  mode: 'train',
  resources_id: null,
  status: 'running',
  config: { max_attempts: 1, retry_condition: [] },
  metadata: {},
  ...extra,
});

const rawSpan = (id: string, extra: Record<string, unknown> = {}) => ({
  rollout_id: 'ro-1',
  attempt_id: 'at-1',
  sequence_id: 1,
  trace_id: 't1',
  span_id: id,
  parent_id: null,
  name: id,
  status: { status_code: 'OK', description: null },
  attributes: { 'gen_ai.prompt.0.content': 'hi' },
  events: [],
  links: [],
  start_time: 10,
  end_time: 11,
  context: { trace_id: 't1', span_id: id, is_remote: false, trace_state: {} },
  parent: null,
  resource: { attributes: { 'service.name': 'x' }, schema_url: '' },
  ...extra,
});

interface Call {
  url: URL;
  headers: Record<string, string>;
}

function fakeServer(handler: (url: URL) => { status?: number; body: unknown }) {
  const calls: Call[] = [];
  const fetchImpl = async (input: string, init?: RequestInit) => {
    const url = new URL(input);
    calls.push({ url, headers: (init?.headers ?? {}) as Record<string, string> });
    const { status = 200, body } = handler(url);
    return new Response(typeof body === 'string' ? body : JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  };
  return { calls, fetchImpl };
}

beforeEach(() => resetCapabilities());

describe('url building', () => {
  it('normalises slashes and falls back to the origin', () => {
    expect(resolveApiUrl('http://h:1/', '/v1/agl/rollouts', 'http://o')).toBe('http://h:1/v1/agl/rollouts');
    expect(resolveApiUrl('  ', 'v1/agl/health', 'http://o:2')).toBe('http://o:2/v1/agl/health');
    expect(resolveApiUrl('http://h', 'http://abs/x', 'http://o')).toBe('http://abs/x');
    // The API address the store prints works as a base URL too.
    expect(resolveApiUrl('http://h:4747/v1/agl/', 'v1/agl/rollouts', 'http://o')).toBe('http://h:4747/v1/agl/rollouts');
    expect(resolveApiUrl('http://h:4747/v1/agl', 'v1/agl/health', 'http://o')).toBe('http://h:4747/v1/agl/health');
  });
  it('repeats multi-valued parameters and omits empty ones', () => {
    expect(buildQuery({ status_in: ['a', 'b'], x: '', y: undefined, z: null, mode_in: [], limit: 5 })).toBe(
      '?status_in=a&status_in=b&limit=5',
    );
  });
});

describe('query arguments', () => {
  const base = { searchTerm: '', page: 1, recordsPerPage: 100, sort: { column: 'startTimestamp', direction: 'desc' as const } };
  it('rollouts defaults', () => {
    expect(selectRolloutsArgs({ ...base, statusFilters: [], modeFilters: [] })).toEqual({
      limit: 100,
      offset: 0,
      sortBy: 'start_time',
      sortOrder: 'desc',
    });
  });
  it('rollouts filters, search and sort mapping', () => {
    const args = selectRolloutsArgs({
      ...base,
      page: 3,
      recordsPerPage: 50,
      searchTerm: '  ro-1 ',
      statusFilters: ['succeeded', 'failed'],
      modeFilters: ['val'],
      sort: { column: 'durationSeconds', direction: 'asc' },
    });
    expect(args).toEqual({
      limit: 50,
      offset: 100,
      sortBy: 'duration',
      sortOrder: 'asc',
      statusIn: ['succeeded', 'failed'],
      modeIn: ['val'],
      rolloutIdContains: 'ro-1',
    });
    expect(selectRolloutsArgs({ ...base, statusFilters: [], modeFilters: [], sort: { column: 'nope', direction: 'asc' } }).sortBy).toBe(
      'start_time',
    );
  });
  it('pagination clamps the page size', () => {
    expect(pagination(2, 0)).toEqual({ limit: 1, offset: 1 });
  });
  it('spans search uses the three contains parameters with or logic', () => {
    const args = selectSpansArgs({ ...base, sort: { column: 'statusCode', direction: 'asc' }, rolloutId: 'ro-1', attemptId: null, searchTerm: 'abc' });
    expect(args?.sortBy).toBe('status_code');
    const params = spansParams(args!);
    expect(params).toMatchObject({ rollout_id: 'ro-1', trace_id_contains: 'abc', span_id_contains: 'abc', name_contains: 'abc', filter_logic: 'or' });
    expect(params.attempt_id).toBeUndefined();
    expect(selectSpansArgs({ ...base, rolloutId: null, attemptId: null })).toBeNull();
  });
  it('resources and workers defaults', () => {
    const s = { ...base, recordsPerPage: 50, sort: { column: 'updateTime', direction: 'desc' as const } };
    expect(selectResourcesArgs(s)).toEqual({ limit: 50, offset: 0, sortBy: 'update_time', sortOrder: 'desc', search: undefined });
    expect(selectWorkersArgs({ ...s, sort: { column: 'currentAttemptId', direction: 'asc' } }).sortBy).toBe('current_attempt_id');
  });
});

describe('normalisation', () => {
  it('rollout with and without attempt', () => {
    const r = normalizeRollout(
      rawRollout('ro-1', { attempt: { rollout_id: 'ro-1', attempt_id: 'at-1', sequence_id: 2, start_time: 5, status: 'running' } }),
    );
    expect(r.rolloutId).toBe('ro-1');
    expect(r.attempt?.attemptId).toBe('at-1');
    expect(r.attempt?.lastHeartbeatTime).toBe(5); // falls back to start time
    expect(r.config).toEqual({ maxAttempts: 1, retryCondition: [] });
    expect(normalizeRollout(rawRollout('ro-2')).attempt).toBeNull();
  });
  it('span keeps attributes verbatim and status snake-case', () => {
    const s = normalizeSpan(rawSpan('s1', { status: { statusCode: 'ERROR' } }));
    expect(s.attributes['gen_ai.prompt.0.content']).toBe('hi');
    expect(s.status).toEqual({ status_code: 'ERROR', description: null });
    expect((s.context as Record<string, unknown>).trace_id).toBe('t1');
    expect(normalizeSpan({ ...rawSpan('s2'), parent_id: undefined }).parentId).toBeNull();
  });
  it('worker nulls and envelope defaults', () => {
    expect(normalizeWorker({ worker_id: 'w' })).toMatchObject({ workerId: 'w', status: 'unknown', lastBusyTime: null });
    expect(normalizePaginated({ items: 'x' }, (v) => v)).toEqual({ items: [], limit: 0, offset: 0, total: 0 });
    expect(() => normalizePaginated(42, (v) => v)).toThrow();
  });
});

describe('formatting and errors', () => {
  it('durations and labels', () => {
    expect(formatDuration(3725)).toBe('1h 2m 5s');
    expect(formatDuration(60)).toBe('1m');
    expect(formatDuration(0.5)).toBe('500 ms');
    expect(formatDuration(0.7)).toBe('700 ms'); // issue 18: a 700 ms span is not "0s"
    expect(formatDuration(1.4)).toBe('1s');
    expect(formatDuration(0)).toBe('—');
    expect(formatStatusLabel('requeuing')).toBe('Requeuing');
    expect(formatStatusLabel('in_progress-now')).toBe('In Progress Now');
    expect(formatRelativeTime(100, 103_000)).toBe('Just now');
    expect(formatRelativeTime(100, 190_000)).toBe('1m 30s ago');
    expect(formatDateTime(null)).toBe('—');
    expect(formatDateTime(0)).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
  });
  it('error descriptors', () => {
    expect(getErrorDescriptor(new ApiError('x', 504, null))).toBe('Timeout');
    expect(getErrorDescriptor(new ApiError('x', 500, 'Read timeout happened'))).toBe('Timeout');
    expect(getErrorDescriptor(new ApiError('x', 401, 'Invalid bearer token'))).toBe('Invalid bearer token');
    expect(getErrorDescriptor(new ApiError('', 502, null))).toBe('status: 502');
    expect(getErrorDescriptor(null)).toBeNull();
  });
});

describe('fetchers against a fake server', () => {
  it('sends the bearer token and repeated filters', async () => {
    const { calls, fetchImpl } = fakeServer(() => ({ body: { items: [rawRollout('ro-1')], limit: 100, offset: 0, total: 1 } }));
    const client = new ApiClient({ baseUrl: 'http://s', token: 'tok', origin: 'http://o' }, fetchImpl);
    const page = await fetchRollouts(client, { limit: 100, offset: 0, sortBy: 'start_time', sortOrder: 'desc', statusIn: ['running', 'failed'] });
    expect(page.total).toBe(1);
    expect(calls[0].headers.Authorization).toBe('Bearer tok');
    expect(calls[0].url.searchParams.getAll('status_in')).toEqual(['running', 'failed']);
  });

  it('raises ApiError with the server detail', async () => {
    const { fetchImpl } = fakeServer(() => ({ status: 401, body: { detail: 'Missing bearer token' } }));
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    await expect(fetchRollouts(client, { limit: 1, offset: 0, sortBy: 'start_time', sortOrder: 'desc' })).rejects.toMatchObject({
      status: 401,
      detail: 'Missing bearer token',
    });
  });

  it('filters by mode locally when the server does not declare mode_in', async () => {
    const all = [rawRollout('a', { mode: 'train' }), rawRollout('b', { mode: 'val' }), rawRollout('c', { mode: null }), rawRollout('d', { mode: 'val' })];
    const { calls, fetchImpl } = fakeServer((url) => {
      if (url.pathname === '/openapi.json') return { body: { paths: { '/v1/agl/rollouts': { get: { parameters: [{ name: 'status_in' }] } } } } };
      return { body: { items: all, limit: -1, offset: 0, total: all.length } };
    });
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    const page = await fetchRollouts(client, { limit: 1, offset: 1, sortBy: 'start_time', sortOrder: 'desc', modeIn: ['val'] });
    expect(page.items.map((r) => r.rolloutId)).toEqual(['d']);
    expect(page.total).toBe(2);
    const listCall = calls.find((c) => c.url.pathname === '/v1/agl/rollouts')!;
    expect(listCall.url.searchParams.getAll('mode_in')).toEqual(['val']);
    expect(listCall.url.searchParams.get('limit')).toBe('-1');
  });

  it('trusts the server when it declares mode_in', async () => {
    const { calls, fetchImpl } = fakeServer((url) => {
      if (url.pathname === '/openapi.json') return { body: { paths: { '/v1/agl/rollouts': { get: { parameters: [{ name: 'mode_in' }] } } } } };
      return { body: { items: [rawRollout('b', { mode: 'val' })], limit: 5, offset: 0, total: 7 } };
    });
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    const page = await fetchRollouts(client, { limit: 5, offset: 0, sortBy: 'start_time', sortOrder: 'desc', modeIn: ['val'] });
    expect(page.total).toBe(7);
    expect(calls.filter((c) => c.url.pathname === '/v1/agl/rollouts')[0].url.searchParams.get('limit')).toBe('5');
  });

  it('sorts by a derived key locally after the server rejects it, and remembers', async () => {
    const att = (id: string, worker: string | null, start: number, end: number | null) => ({
      rollout_id: id, attempt_id: `at-${id}`, sequence_id: 1, start_time: start, end_time: end, status: 'running', worker_id: worker,
    });
    const all = [
      rawRollout('a', { attempt: att('a', 'w-2', 0, 50) }),
      rawRollout('b', { attempt: att('b', null, 0, 10) }),
      rawRollout('c', { attempt: att('c', 'w-1', 0, 30) }),
    ];
    const { calls, fetchImpl } = fakeServer((url) => {
      const sortBy = url.searchParams.get('sort_by');
      if (sortBy && !['start_time', 'rollout_id', 'status'].includes(sortBy)) {
        return { status: 400, body: { detail: `Invalid sort_by: ${sortBy}, allowed fields are: rollout_id, ...` } };
      }
      return { body: { items: all, limit: -1, offset: 0, total: 3 } };
    });
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    const byDuration = await fetchRollouts(client, { limit: 10, offset: 0, sortBy: 'duration', sortOrder: 'desc' });
    expect(byDuration.items.map((r) => r.rolloutId)).toEqual(['a', 'c', 'b']);
    const n = calls.length;
    await fetchRollouts(client, { limit: 10, offset: 0, sortBy: 'duration', sortOrder: 'asc' });
    expect(calls.length).toBe(n + 1); // no second rejected attempt
    const byWorker = await fetchRollouts(client, { limit: 2, offset: 0, sortBy: 'worker_id', sortOrder: 'asc' });
    expect(byWorker.items.map((r) => r.rolloutId)).toEqual(['c', 'a']); // null worker last
    expect(byWorker.total).toBe(3);
  });

  it('sorts spans by status_code locally when rejected', async () => {
    const all = [rawSpan('s1', { status: { status_code: 'OK' } }), rawSpan('s2', { status: { status_code: 'ERROR' } }), rawSpan('s3', { status: { status_code: 'UNSET' } })];
    const { fetchImpl } = fakeServer((url) =>
      url.searchParams.get('sort_by') === 'status_code'
        ? { status: 400, body: { detail: 'Invalid sort_by: status_code, allowed fields are: ...' } }
        : { body: { items: all, limit: -1, offset: 0, total: 3 } },
    );
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    const page = await fetchSpans(client, { rolloutId: 'ro-1', limit: 100, offset: 0, sortBy: 'status_code', sortOrder: 'asc' });
    expect(page.items.map((s) => s.spanId)).toEqual(['s2', 's1', 's3']);
  });

  it('does not swallow other errors', async () => {
    const { fetchImpl } = fakeServer(() => ({ status: 500, body: { detail: 'Internal server error' } }));
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    await expect(fetchRollouts(client, { limit: 1, offset: 0, sortBy: 'duration', sortOrder: 'asc' })).rejects.toBeInstanceOf(ApiError);
  });
});

describe('insights', () => {
  const span = (id: string, parent: string | null, start: number | null, end: number | null, seq = 1, attrs = {}, name = id): Span =>
    normalizeSpan(rawSpan(id, { parent_id: parent, start_time: start, end_time: end, sequence_id: seq, attributes: attrs, name }));


  it('waterfall nests children under parents and positions bars', () => {
    const layout = buildWaterfall([
      span('child2', 'root', 15, 18, 3),
      span('root', null, 10, 20, 1),
      span('child1', 'root', 11, 14, 2),
      span('grand', 'child1', 12, null, 4),
      span('orphan', 'missing', 19, 20, 5),
    ], 20);
    expect(layout.rows.map((r) => [r.span.spanId, r.depth])).toEqual([
      ['root', 0],
      ['child1', 1],
      ['grand', 2],
      ['child2', 1],
      ['orphan', 0],
    ]);
    expect(layout.start).toBe(10);
    expect(layout.total).toBe(10);
    expect(layout.rows[1].offset).toBe(1);
    expect(layout.rows[2].open).toBe(true);
    expect(layout.rows[0].hasChildren).toBe(true);
  });

  it('attribute entries are sorted and stringified', () => {
    expect(attributeEntries({ b: 1, a: 'x', c: [1, 2] })).toEqual([['a', 'x'], ['b', '1'], ['c', '[1,2]']]);
  });

  it('local sort is stable with nulls last', () => {
    expect(sortLocally([{ v: 2 }, { v: null }, { v: 1 }, { v: 2 }], (x) => x.v, 'desc').map((x) => x.v)).toEqual([2, 2, 1, null]);
  });
});

describe('training data (issue 18)', () => {
  const row = (id: string, resourcesId: string | null, mode: RewardRow['mode'], reward: number | null, start = 1): RewardRow => ({
    rolloutId: id, attemptId: `at-${id}`, resourcesId, mode, status: 'succeeded', startTime: start, endTime: start + 1, reward,
  });

  it('the learning curve aggregates per version in creation order and per mode', () => {
    const curve = buildLearningCurve(
      [row('a', 'v2', 'val', 1, 5), row('b', 'v1', 'train', 0.2), row('c', 'v1', 'train', 0.6), row('d', 'v2', 'val', 0.5, 6),
        row('e', 'v1', 'val', 0), row('f', 'v2', 'val', null), row('g', null, null, 0.3), row('h', 'v9', 'train', 1, 0)],
      new Map([['v1', 10], ['v2', 20]]),
    );
    expect(curve.versions).toEqual(['—', 'v1', 'v2', 'v9']); // no resources first, unknown versions last
    expect(curve.modes).toEqual(['train', 'val', 'none']);
    expect(curve.rewarded).toBe(7);
    expect(curve.unrewarded).toBe(1);
    const v1train = curve.points.find((p) => p.resourcesId === 'v1' && p.mode === 'train')!;
    expect(v1train.count).toBe(2);
    expect(v1train.mean).toBeCloseTo(0.4);
    expect(v1train.std).toBeCloseTo(0.2);
    expect([v1train.min, v1train.max]).toEqual([0.2, 0.6]);
    expect(curve.points.map((p) => `${p.resourcesId}:${p.mode}`)).toEqual(['—:none', 'v1:train', 'v1:val', 'v2:val', 'v9:train']);
  });

  it('reads rewards from the export route (JSONL) with the selection as repeated parameters', async () => {
    const lines = [
      { rollout_id: 'r1', attempt_id: 'a1', resources_id: 'v1', mode: 'train', status: 'succeeded', start_time: 1, end_time: 2, reward: 0.5 },
      { rollout_id: 'r2', attempt_id: null, resources_id: null, mode: null, status: 'queuing', start_time: 3, end_time: null, reward: null },
    ];
    const { calls, fetchImpl } = fakeServer((url) =>
      url.pathname === '/v1/agl/resources'
        ? { body: { items: [{ resources_id: 'v1', version: 1, create_time: 5, update_time: 5, resources: {} }], limit: -1, offset: 0, total: 1 } }
        : { body: lines.map((l) => JSON.stringify(l)).join('\n') + '\n' },
    );
    const client = new ApiClient({ baseUrl: 'http://s', token: 't', origin: 'http://o' }, fetchImpl);
    const rewards = await fetchRewardsOf(client, ['r1', 'r2']);
    expect([...rewards.entries()]).toEqual([['r1', 0.5], ['r2', null]]);
    const exportCall = calls.find((c) => c.url.pathname === '/v1/agl/export')!;
    expect(exportCall.url.searchParams.get('format')).toBe('rewards');
    expect(exportCall.url.searchParams.getAll('rollout_id_in')).toEqual(['r1', 'r2']);
    expect(exportCall.url.searchParams.getAll('status_in')).toHaveLength(7);
    expect(exportCall.headers.Authorization).toBe('Bearer t');
    const history = await fetchRewardHistory(client);
    expect(history.rows.map((r) => r.rolloutId)).toEqual(['r1', 'r2']);
    expect([...history.createTimes.entries()]).toEqual([['v1', 5]]);
    expect(calls.at(-2)!.url.searchParams.getAll('status_in')).toEqual(['succeeded', 'failed']);
    expect(parseJsonl('{"a":1}\n\n{"a":2}\n')).toEqual([{ a: 1 }, { a: 2 }]);
    expect([formatReward(1), formatReward(0.25), formatReward(1 / 3), formatReward(null)]).toEqual(['1.0', '0.25', '0.333', '—']);
  });

  it('status counts ask the store for each status total', async () => {
    const { fetchImpl } = fakeServer((url) => ({ body: { items: [], limit: 1, offset: 0, total: url.searchParams.get('status_in') === 'succeeded' ? 3 : 1 } }));
    const client = new ApiClient({ baseUrl: 'http://s', token: '', origin: 'http://o' }, fetchImpl);
    const counts = await fetchStatusCounts(client);
    expect(counts.total).toBe(3 + 6);
    expect(counts.succeeded).toBe(3);
  });
});

describe('polling', () => {
  it('polls every interval while the server answers quickly', () => {
    const last = { startMs: 1000, endMs: 1050 };
    expect(pollDue(5999, last, 5000)).toBe(false);
    expect(pollDue(6000, last, 5000)).toBe(true);
    expect(pollCheckMs(5000)).toBe(1000);
    expect(pollCheckMs(250)).toBe(250);
  });

  it('never polls while a request is in flight', () => {
    expect(pollDue(1e9, { startMs: 1000, endMs: -1 }, 5000)).toBe(false);
  });

  it('lets a slow server rest 4x as long as its last answer took', () => {
    expect(POLL_BACKOFF_FACTOR).toBe(4);
    const last = { startMs: 0, endMs: 2000 }; // a 2 s refresh (a big store)
    expect(pollDue(5000, last, 5000)).toBe(false); // the interval has passed, the rest has not
    expect(pollDue(9999, last, 5000)).toBe(false);
    expect(pollDue(10000, last, 5000)).toBe(true); // 2 s of work per 10 s: 20 % of the server's time
  });
});
