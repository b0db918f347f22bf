// Query arguments, sort-key mappings and fetchers.
//
// Reference mismatches between the dashboard's requests and the server's API, fixed here:
// * `mode_in`: always sent; when the server does not declare it in its OpenAPI document the rollouts are
//   filtered by mode in the browser (all matches are fetched, then filtered and paginated locally).
// * derived sort keys (`attempt_id`, `duration`, `last_heartbeat_time`, `worker_id` for rollouts; `status_code`,
//   `duration` for spans): sent to the server first; if the server rejects them (HTTP 400 "Invalid sort_by"), the
//   dashboard remembers that and sorts all matches locally. Both paths give the same rows.
import { ApiClient, ApiError } from './client';
import {
  normalizeAttempt,
  normalizePaginated,
  normalizeResources,
  normalizeRollout,
  normalizeSpan,
  normalizeWorker,
} from './normalize';
import type {
  Attempt,
  Paginated,
  ResourcesUpdate,
  Rollout,
  RolloutMode,
  RolloutStatus,
  SortOrder,
  SortState,
  Span,
  Worker,
  WorkerStatus,
} from './types';
import type { Params } from './url';

// ---------------------------------------------------------------------------------------------------------------
// Sort mappings: table column accessor → backend sort key.

export const ROLLOUT_SORT_KEYS: Record<string, string> = {
  rolloutId: 'rollout_id',
  attemptId: 'attempt_id',
  statusValue: 'status',
  resourcesId: 'resources_id',
  mode: 'mode',
  startTimestamp: 'start_time',
  durationSeconds: 'duration',
  lastHeartbeatTimestamp: 'last_heartbeat_time',
  workerId: 'worker_id',
};
export const SPAN_SORT_KEYS: Record<string, string> = {
  name: 'name',
  sequenceId: 'sequence_id',
  traceId: 'trace_id',
  spanId: 'span_id',
  parentId: 'parent_id',
  statusCode: 'status_code',
  startTime: 'start_time',
  endTime: 'end_time',
  duration: 'duration',
};
export const RESOURCES_SORT_KEYS: Record<string, string> = {
  resourcesId: 'resources_id',
  version: 'version',
  createTime: 'create_time',
  updateTime: 'update_time',
};
export const WORKER_SORT_KEYS: Record<string, string> = {
  workerId: 'worker_id',
  status: 'status',
  currentRolloutId: 'current_rollout_id',
  currentAttemptId: 'current_attempt_id',
  lastHeartbeatTime: 'last_heartbeat_time',
  lastDequeueTime: 'last_dequeue_time',
  lastBusyTime: 'last_busy_time',
  lastIdleTime: 'last_idle_time',
};

export function mapSortKey(mapping: Record<string, string>, column: string | undefined, fallback: string): string {
  return (column && mapping[column]) || fallback;
}

/** Rollout sort keys that are not fields of the Rollout model (the reference server rejects them). */
export const DERIVED_ROLLOUT_SORT_KEYS = new Set(['attempt_id', 'duration', 'last_heartbeat_time', 'worker_id']);
/** Span sort keys that are not fields of the Span model. */
export const DERIVED_SPAN_SORT_KEYS = new Set(['status_code', 'duration']);

// ---------------------------------------------------------------------------------------------------------------
// Query arguments (the "selectors" of the reference).

export interface PageState {
  searchTerm: string;
  page: number;
  recordsPerPage: number;
  sort: SortState;
}

export interface RolloutsArgs {
  limit: number;
  offset: number;
  sortBy: string;
  sortOrder: SortOrder;
  statusIn?: RolloutStatus[];
  modeIn?: RolloutMode[];
  rolloutIdContains?: string;
}

export function pagination(page: number, recordsPerPage: number): { limit: number; offset: number } {
  const limit = Math.max(1, Math.floor(recordsPerPage) || 1);
  const p = Math.max(1, Math.floor(page) || 1);
  return { limit, offset: (p - 1) * limit };
}

export function selectRolloutsArgs(
  state: PageState & { statusFilters: RolloutStatus[]; modeFilters: RolloutMode[] },
): RolloutsArgs {
  const args: RolloutsArgs = {
    ...pagination(state.page, state.recordsPerPage),
    sortBy: mapSortKey(ROLLOUT_SORT_KEYS, state.sort.column, 'start_time'),
    sortOrder: state.sort.direction,
  };
  if (state.statusFilters.length) args.statusIn = [...state.statusFilters];
  if (state.modeFilters.length) args.modeIn = [...state.modeFilters];
  const term = state.searchTerm.trim();
  if (term) args.rolloutIdContains = term;
  return args;
}

export function rolloutsParams(args: RolloutsArgs): Params {
  return {
    limit: Number.isFinite(args.limit) ? args.limit : -1,
    offset: args.offset ?? 0,
    sort_by: args.sortBy,
    sort_order: args.sortOrder,
    status_in: args.statusIn,
    mode_in: args.modeIn,
    rollout_id_contains: args.rolloutIdContains?.trim() || undefined,
  };
}

export interface SpansArgs {
  rolloutId: string;
  attemptId?: string | null;
  limit: number;
  offset: number;
  sortBy: string;
  sortOrder: SortOrder;
  searchTerm?: string;
  parentIdContains?: string;
  filterLogic?: 'and' | 'or';
}

export function selectSpansArgs(
  state: PageState & { rolloutId: string | null; attemptId: string | null },
): SpansArgs | null {
  if (!state.rolloutId) return null;
  return {
    rolloutId: state.rolloutId,
    attemptId: state.attemptId,
    ...pagination(state.page, state.recordsPerPage),
    sortBy: mapSortKey(SPAN_SORT_KEYS, state.sort.column, 'start_time'),
    sortOrder: state.sort.direction,
    searchTerm: state.searchTerm.trim() || undefined,
  };
}

export function spansParams(args: SpansArgs): Params {
  if (!args.rolloutId) throw new Error('rolloutId is required to query spans');
  const term = args.searchTerm?.trim();
  return {
    rollout_id: args.rolloutId,
    attempt_id: args.attemptId || undefined,
    limit: args.limit,
    offset: args.offset,
    sort_by: args.sortBy,
    sort_order: args.sortOrder,
    trace_id_contains: term || undefined,
    span_id_contains: term || undefined,
    name_contains: term || undefined,
    parent_id_contains: args.parentIdContains || undefined,
    filter_logic: term ? 'or' : args.filterLogic,
  };
}

export interface SimpleListArgs {
  limit: number;
  offset: number;
  sortBy: string;
  sortOrder: SortOrder;
  search?: string;
}

export function selectResourcesArgs(state: PageState): SimpleListArgs {
  return {
    ...pagination(state.page, state.recordsPerPage),
    sortBy: mapSortKey(RESOURCES_SORT_KEYS, state.sort.column, 'update_time'),
    sortOrder: state.sort.direction,
    search: state.searchTerm.trim() || undefined,
  };
}

export function resourcesParams(args: SimpleListArgs): Params {
  return {
    limit: args.limit,
    offset: args.offset,
    sort_by: args.sortBy,
    sort_order: args.sortOrder,
    resources_id_contains: args.search,
  };
}

export function selectWorkersArgs(state: PageState): SimpleListArgs {
  return {
    ...pagination(state.page, state.recordsPerPage),
    sortBy: mapSortKey(WORKER_SORT_KEYS, state.sort.column, 'last_heartbeat_time'),
    sortOrder: state.sort.direction,
    search: state.searchTerm.trim() || undefined,
  };
}

export function workersParams(args: SimpleListArgs & { statusIn?: WorkerStatus[] }): Params {
  return {
    limit: args.limit,
    offset: args.offset,
    sort_by: args.sortBy,
    sort_order: args.sortOrder,
    worker_id_contains: args.search,
    status_in: args.statusIn,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Local sorting / filtering used when the server cannot do it.

type SortValue = string | number | null | undefined;

/** Stable sort; null/undefined always last (like the in-memory store's `*_time` fields in `asc`). */
export function sortLocally<T>(items: readonly T[], key: (item: T) => SortValue, order: SortOrder): T[] {
  const indexed = items.map((item, index) => ({ item, index, value: key(item) }));
  const dir = order === 'desc' ? -1 : 1;
  indexed.sort((a, b) => {
    const an = a.value === null || a.value === undefined;
    const bn = b.value === null || b.value === undefined;
    if (an || bn) return an === bn ? a.index - b.index : an ? 1 : -1;
    const av = a.value as string | number;
    const bv = b.value as string | number;
    const cmp = typeof av === 'number' && typeof bv === 'number' ? av - bv : String(av).localeCompare(String(bv));
    return cmp !== 0 ? cmp * dir : a.index - b.index;
  });
  return indexed.map((e) => e.item);
}

export function paginateLocally<T>(items: readonly T[], limit: number, offset: number): Paginated<T> {
  const slice = limit < 0 ? items.slice(offset) : items.slice(offset, offset + limit);
  return { items: slice, limit, offset, total: items.length };
}

/** Duration of a rollout row: (attempt end, else rollout end, else now) − (attempt start, else rollout start). */
export function rolloutDuration(r: Rollout, nowSeconds: number): number | null {
  const start = r.attempt?.startTime ?? r.startTime;
  if (start === null || start === undefined) return null;
  const end = r.attempt?.endTime ?? r.endTime ?? nowSeconds;
  return Math.max(0, end - start);
}

export function rolloutSortValue(r: Rollout, sortBy: string, nowSeconds: number): SortValue {
  switch (sortBy) {
    case 'attempt_id':
      return r.attempt?.attemptId ?? null;
    case 'duration':
      return rolloutDuration(r, nowSeconds);
    case 'last_heartbeat_time':
      return r.attempt?.lastHeartbeatTime ?? null;
    case 'worker_id':
      return r.attempt?.workerId ?? null;
    case 'start_time':
      return r.attempt?.startTime ?? r.startTime;
    default: {
      const camel = sortBy.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
      return (r as unknown as Record<string, SortValue>)[camel] ?? null;
    }
  }
}

export function spanDuration(s: Span): number {
  return s.startTime !== null && s.endTime !== null ? Math.max(0, s.endTime - s.startTime) : 0;
}

export function spanSortValue(s: Span, sortBy: string): SortValue {
  switch (sortBy) {
    case 'status_code':
      return s.status.status_code;
    case 'duration':
      return spanDuration(s);
    default: {
      const camel = sortBy.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
      return (s as Record<string, unknown>)[camel] as SortValue;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Server capabilities (remembered per server).

interface Capabilities {
  modeIn?: Promise<boolean>;
  rejectedSorts: Set<string>;
}
const capabilities = new Map<string, Capabilities>();

function caps(client: ApiClient): Capabilities {
  let c = capabilities.get(client.serverKey);
  if (!c) {
    c = { rejectedSorts: new Set() };
    capabilities.set(client.serverKey, c);
  }
  return c;
}

export function resetCapabilities(): void {
  capabilities.clear();
}

/** Whether `GET /v1/agl/rollouts` declares a `mode_in` parameter in the server's OpenAPI document. */
export function serverSupportsModeIn(client: ApiClient): Promise<boolean> {
  const c = caps(client);
  if (!c.modeIn) {
    c.modeIn = client
      .getJson('openapi.json')
      .then((doc) => {
        const params = (doc as { paths?: Record<string, { get?: { parameters?: { name?: string }[] } }> })?.paths?.[
          '/v1/agl/rollouts'
        ]?.get?.parameters;
        return Array.isArray(params) && params.some((p) => p?.name === 'mode_in');
      })
      .catch(() => false);
  }
  return c.modeIn;
}

function isInvalidSort(err: unknown): boolean {
  return err instanceof ApiError && err.status === 400 && /sort_by/i.test(err.detail ?? err.message);
}

// ---------------------------------------------------------------------------------------------------------------
// Fetchers.

export async function fetchRollouts(
  client: ApiClient,
  args: RolloutsArgs,
  signal?: AbortSignal,
  nowSeconds: number = Date.now() / 1000,
): Promise<Paginated<Rollout>> {
  const c = caps(client);
  const derived = DERIVED_ROLLOUT_SORT_KEYS.has(args.sortBy) && c.rejectedSorts.has(`rollouts:${args.sortBy}`);
  const modeLocal = !!args.modeIn?.length && !(await serverSupportsModeIn(client));
  if (!derived && !modeLocal) {
    try {
      const raw = await client.getJson('v1/agl/rollouts', rolloutsParams(args), signal);
      return normalizePaginated(raw, normalizeRollout);
    } catch (err) {
      if (!(DERIVED_ROLLOUT_SORT_KEYS.has(args.sortBy) && isInvalidSort(err))) throw err;
      c.rejectedSorts.add(`rollouts:${args.sortBy}`);
    }
  }
  return fetchRolloutsLocally(client, args, signal, nowSeconds, c);
}

async function fetchRolloutsLocally(
  client: ApiClient,
  args: RolloutsArgs,
  signal: AbortSignal | undefined,
  nowSeconds: number,
  c: Capabilities,
): Promise<Paginated<Rollout>> {
  const serverSort = !c.rejectedSorts.has(`rollouts:${args.sortBy}`);
  const params = rolloutsParams({
    ...args,
    limit: -1,
    offset: 0,
    sortBy: serverSort ? args.sortBy : 'start_time',
    sortOrder: serverSort ? args.sortOrder : 'desc',
  });
  const raw = await client.getJson('v1/agl/rollouts', params, signal);
  let items = normalizePaginated(raw, normalizeRollout).items;
  if (args.modeIn?.length) {
    const modes = new Set<string>(args.modeIn);
    items = items.filter((r) => r.mode !== null && modes.has(r.mode));
  }
  if (!serverSort) items = sortLocally(items, (r) => rolloutSortValue(r, args.sortBy, nowSeconds), args.sortOrder);
  return paginateLocally(items, args.limit, args.offset);
}

export interface AttemptsArgs {
  rolloutId: string;
  limit?: number;
  offset?: number;
  sortBy?: string;
  sortOrder?: SortOrder;
}

export async function fetchAttempts(client: ApiClient, args: AttemptsArgs, signal?: AbortSignal): Promise<Paginated<Attempt>> {
  const raw = await client.getJson(
    `v1/agl/rollouts/${encodeURIComponent(args.rolloutId)}/attempts`,
    {
      limit: args.limit ?? -1,
      offset: args.offset ?? 0,
      sort_by: args.sortBy ?? 'sequence_id',
      sort_order: args.sortOrder ?? 'desc',
    },
    signal,
  );
  return normalizePaginated(raw, normalizeAttempt);
}

export async function fetchSpans(client: ApiClient, args: SpansArgs, signal?: AbortSignal): Promise<Paginated<Span>> {
  const c = caps(client);
  const key = `spans:${args.sortBy}`;
  if (!(DERIVED_SPAN_SORT_KEYS.has(args.sortBy) && c.rejectedSorts.has(key))) {
    try {
      const raw = await client.getJson('v1/agl/spans', spansParams(args), signal);
      return normalizePaginated(raw, normalizeSpan);
    } catch (err) {
      if (!(DERIVED_SPAN_SORT_KEYS.has(args.sortBy) && isInvalidSort(err))) throw err;
      c.rejectedSorts.add(key);
    }
  }
  const raw = await client.getJson(
    'v1/agl/spans',
    spansParams({ ...args, limit: -1, offset: 0, sortBy: 'sequence_id', sortOrder: 'asc' }),
    signal,
  );
  const items = sortLocally(normalizePaginated(raw, normalizeSpan).items, (s) => spanSortValue(s, args.sortBy), args.sortOrder);
  return paginateLocally(items, args.limit, args.offset);
}

export async function fetchResources(
  client: ApiClient,
  args: SimpleListArgs,
  signal?: AbortSignal,
): Promise<Paginated<ResourcesUpdate>> {
  return normalizePaginated(await client.getJson('v1/agl/resources', resourcesParams(args), signal), normalizeResources);
}

export async function fetchWorkers(
  client: ApiClient,
  args: SimpleListArgs & { statusIn?: WorkerStatus[] },
  signal?: AbortSignal,
): Promise<Paginated<Worker>> {
  return normalizePaginated(await client.getJson('v1/agl/workers', workersParams(args), signal), normalizeWorker);
}
