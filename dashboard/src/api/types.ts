// Client-side mirror of the store models (camelCase; times are epoch seconds).
export type RolloutStatus = 'queuing' | 'preparing' | 'running' | 'failed' | 'succeeded' | 'cancelled' | 'requeuing';
export type AttemptStatus = 'preparing' | 'running' | 'failed' | 'succeeded' | 'unresponsive' | 'timeout';
export type RolloutMode = 'train' | 'val' | 'test';
export type WorkerStatus = 'idle' | 'busy' | 'unknown';
export type SortOrder = 'asc' | 'desc';
export type SpanStatusCode = 'UNSET' | 'OK' | 'ERROR';

export const ROLLOUT_STATUSES: RolloutStatus[] = [
  'queuing',
  'preparing',
  'running',
  'failed',
  'succeeded',
  'cancelled',
  'requeuing',
];
export const ROLLOUT_MODES: RolloutMode[] = ['train', 'val', 'test'];

export interface Attempt {
  rolloutId: string;
  attemptId: string;
  sequenceId: number;
  startTime: number | null;
  endTime: number | null;
  status: AttemptStatus;
  workerId: string | null;
  lastHeartbeatTime: number | null;
  metadata: Record<string, unknown> | null;
}

export interface Rollout {
  rolloutId: string;
  input: unknown;
  startTime: number | null;
  endTime: number | null;
  mode: RolloutMode | null;
  resourcesId: string | null;
  status: RolloutStatus;
  config: Record<string, unknown> | null;
  metadata: Record<string, unknown> | null;
  attempt: Attempt | null;
}

export interface SpanStatus {
  status_code: SpanStatusCode | string;
  description: string | null;
}

export interface Span {
  rolloutId: string;
  attemptId: string;
  sequenceId: number;
  traceId: string;
  spanId: string;
  parentId: string | null;
  name: string;
  status: SpanStatus;
  attributes: Record<string, unknown>;
  events: unknown[];
  links: unknown[];
  startTime: number | null;
  endTime: number | null;
  context: unknown;
  parent: unknown;
  resource: unknown;
  [extra: string]: unknown;
}

export interface ResourcesUpdate {
  resourcesId: string;
  version: number;
  createTime: number | null;
  updateTime: number | null;
  resources: Record<string, unknown>;
}

export interface Worker {
  workerId: string;
  status: WorkerStatus;
  heartbeatStats: Record<string, unknown> | null;
  lastHeartbeatTime: number | null;
  lastDequeueTime: number | null;
  lastBusyTime: number | null;
  lastIdleTime: number | null;
  currentRolloutId: string | null;
  currentAttemptId: string | null;
}

export interface Paginated<T> {
  items: T[];
  limit: number;
  offset: number;
  total: number;
}

export interface SortState {
  column: string;
  direction: SortOrder;
}
