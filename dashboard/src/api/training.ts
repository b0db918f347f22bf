// Training data read through the store's export routes (issue 18): per-rollout final rewards (learning curve and
// reward column), a rollout's conversation (the same adapter as `rollouthub export messages`) and JSONL downloads.
import { ApiClient, ApiError } from './client';
import type { RolloutMode, RolloutStatus } from './types';
import { ROLLOUT_STATUSES } from './types';
import type { Params } from './url';

export type ExportFormat = 'messages' | 'triplets' | 'preferences' | 'rewards';
export const EXPORT_FORMATS: ExportFormat[] = ['messages', 'triplets', 'preferences', 'rewards'];

export interface ExportSelection {
  statusIn?: RolloutStatus[];
  modeIn?: RolloutMode[];
  resourcesIdIn?: string[];
  rolloutIdIn?: string[];
}

export function exportParams(format: ExportFormat, s: ExportSelection = {}): Params {
  return {
    format,
    status_in: s.statusIn?.length ? s.statusIn : undefined,
    mode_in: s.modeIn?.length ? s.modeIn : undefined,
    resources_id_in: s.resourcesIdIn?.length ? s.resourcesIdIn : undefined,
    rollout_id_in: s.rolloutIdIn?.length ? s.rolloutIdIn : undefined,
  };
}

/** Parse a JSONL (NDJSON) body; blank lines are ignored. */
export function parseJsonl<T = Record<string, unknown>>(text: string): T[] {
  const out: T[] = [];
  for (const line of text.split('\n')) {
    if (line.trim()) out.push(JSON.parse(line) as T);
  }
  return out;
}

export interface RewardRow {
  rolloutId: string;
  attemptId: string | null;
  resourcesId: string | null;
  mode: RolloutMode | null;
  status: RolloutStatus;
  startTime: number | null;
  endTime: number | null;
  reward: number | null;
}

function toRewardRow(raw: Record<string, unknown>): RewardRow {
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  return {
    rolloutId: String(raw.rollout_id),
    attemptId: (raw.attempt_id as string | null) ?? null,
    resourcesId: (raw.resources_id as string | null) ?? null,
    mode: (raw.mode as RolloutMode | null) ?? null,
    status: raw.status as RolloutStatus,
    startTime: num(raw.start_time),
    endTime: num(raw.end_time),
    reward: num(raw.reward),
  };
}

/** Final rewards of the selected rollouts (`GET v1/agl/export?format=rewards`). */
export async function fetchRewards(client: ApiClient, selection: ExportSelection = {}, signal?: AbortSignal): Promise<RewardRow[]> {
  const text = await client.getText('v1/agl/export', exportParams('rewards', selection), signal);
  return parseJsonl(text).map(toRewardRow);
}

/** Final reward by rollout id for the given rollouts, whatever their status (the rollouts table's reward column). */
export async function fetchRewardsOf(client: ApiClient, rolloutIds: string[], signal?: AbortSignal): Promise<Map<string, number | null>> {
  const out = new Map<string, number | null>();
  if (rolloutIds.length === 0) return out;
  const rows = await fetchRewards(client, { rolloutIdIn: rolloutIds, statusIn: ROLLOUT_STATUSES }, signal);
  for (const r of rows) out.set(r.rolloutId, r.reward);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Learning curve: mean final reward per resources version (ordered by the version's creation) and mode.

export interface CurvePoint {
  resourcesId: string;
  mode: string;
  count: number;
  mean: number;
  std: number;
  min: number;
  max: number;
}

export interface LearningCurve {
  /** Resources ids in creation order (x axis); rollouts without resources are grouped under "—" first. */
  versions: string[];
  /** Modes present, in the order train, val, test, then "none". */
  modes: string[];
  points: CurvePoint[];
  /** Finished rollouts with a reward / without one. */
  rewarded: number;
  unrewarded: number;
}

export const NO_RESOURCES = '—';
const MODE_ORDER = ['train', 'val', 'test', 'none'];

/** Aggregate per-rollout rewards into the learning curve; `createTimes` orders the versions (unknown ones last, by
 * their first rollout). */
export function buildLearningCurve(rows: readonly RewardRow[], createTimes: ReadonlyMap<string, number>): LearningCurve {
  const groups = new Map<string, { resourcesId: string; mode: string; values: number[] }>();
  const firstSeen = new Map<string, number>();
  let unrewarded = 0;
  rows.forEach((r, i) => {
    if (r.reward === null) {
      unrewarded++;
      return;
    }
    const resourcesId = r.resourcesId ?? NO_RESOURCES;
    const mode = r.mode ?? 'none';
    if (!firstSeen.has(resourcesId)) firstSeen.set(resourcesId, r.startTime ?? i);
    const key = `${resourcesId}\u0000${mode}`;
    let g = groups.get(key);
    if (!g) {
      g = { resourcesId, mode, values: [] };
      groups.set(key, g);
    }
    g.values.push(r.reward);
  });
  const rank = (id: string): [number, number, number] =>
    id === NO_RESOURCES ? [0, 0, 0] : createTimes.has(id) ? [1, createTimes.get(id)!, 0] : [2, firstSeen.get(id) ?? 0, 0];
  const versions = [...firstSeen.keys()].sort((a, b) => {
    const ra = rank(a);
    const rb = rank(b);
    return ra[0] - rb[0] || ra[1] - rb[1] || a.localeCompare(b);
  });
  const points: CurvePoint[] = [...groups.values()].map((g) => {
    const n = g.values.length;
    const mean = g.values.reduce((s, v) => s + v, 0) / n;
    const variance = g.values.reduce((s, v) => s + (v - mean) ** 2, 0) / n;
    return { resourcesId: g.resourcesId, mode: g.mode, count: n, mean, std: Math.sqrt(variance), min: Math.min(...g.values), max: Math.max(...g.values) };
  });
  const vIndex = new Map(versions.map((v, i) => [v, i]));
  points.sort((a, b) => vIndex.get(a.resourcesId)! - vIndex.get(b.resourcesId)! || MODE_ORDER.indexOf(a.mode) - MODE_ORDER.indexOf(b.mode));
  const modes = MODE_ORDER.filter((m) => points.some((p) => p.mode === m));
  return { versions, modes, points, rewarded: rows.length - unrewarded, unrewarded };
}

/** Final rewards of the finished rollouts and the creation time of every resources version: what the learning curve
 * and its run selector are built from. */
export interface RewardHistory {
  rows: RewardRow[];
  createTimes: Map<string, number>;
}

/** One rewards export of the finished rollouts (succeeded or failed) and the resources list (for the order). */
export async function fetchRewardHistory(client: ApiClient, signal?: AbortSignal): Promise<RewardHistory> {
  const [rows, resources] = await Promise.all([
    fetchRewards(client, { statusIn: ['succeeded', 'failed'] }, signal),
    client.getJson('v1/agl/resources', { limit: -1, offset: 0, sort_by: 'create_time', sort_order: 'asc' }, signal),
  ]);
  const createTimes = new Map<string, number>();
  for (const item of ((resources as { items?: unknown[] })?.items ?? []) as Record<string, unknown>[]) {
    if (typeof item.resources_id === 'string' && typeof item.create_time === 'number') createTimes.set(item.resources_id, item.create_time);
  }
  return { rows, createTimes };
}

// ---------------------------------------------------------------------------------------------------------------
// Conversation view.

export interface ChatToolCall {
  id: string | null;
  type: string;
  function: { name: string | null; arguments: string | null };
}
export interface ChatMessage {
  role: string;
  content: unknown;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  name?: string;
}
export interface LlmCall {
  spanId: string;
  name: string;
  model: string | null;
  startTime: number | null;
  endTime: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  totalTokens: number | null;
  prompt: ChatMessage[];
  response: ChatMessage[];
  tools: { type: string; function: { name: string; description?: string; parameters?: unknown } }[] | null;
}
export interface ConversationView {
  rolloutId: string;
  attemptId: string | null;
  reward: number | null;
  calls: LlmCall[];
}

export async function fetchConversation(client: ApiClient, rolloutId: string, signal?: AbortSignal): Promise<ConversationView> {
  const raw = (await client.getJson(`v1/agl/rollouts/${encodeURIComponent(rolloutId)}/conversation`, {}, signal)) as Record<string, unknown>;
  const calls = ((raw.calls as Record<string, unknown>[]) ?? []).map((c) => ({
    spanId: String(c.span_id),
    name: String(c.name ?? ''),
    model: (c.model as string | null) ?? null,
    startTime: (c.start_time as number | null) ?? null,
    endTime: (c.end_time as number | null) ?? null,
    promptTokens: (c.prompt_tokens as number | null) ?? null,
    completionTokens: (c.completion_tokens as number | null) ?? null,
    totalTokens: (c.total_tokens as number | null) ?? null,
    prompt: (c.prompt as ChatMessage[]) ?? [],
    response: (c.response as ChatMessage[]) ?? [],
    tools: (c.tools as LlmCall['tools']) ?? null,
  }));
  return {
    rolloutId: String(raw.rollout_id),
    attemptId: (raw.attempt_id as string | null) ?? null,
    reward: typeof raw.reward === 'number' ? raw.reward : null,
    calls,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Export download.

/** Fetch an export (with the API token when set) and hand it to the browser as a file; returns the row count. */
export async function downloadExport(client: ApiClient, format: ExportFormat, selection: ExportSelection): Promise<number> {
  const text = await client.getText('v1/agl/export', exportParams(format, selection));
  const blob = new Blob([text], { type: 'application/x-ndjson' });
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = `rollouthub-${format}.jsonl`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  window.setTimeout(() => URL.revokeObjectURL(href), 10_000);
  return text.split('\n').filter((l) => l.trim()).length;
}

export function formatReward(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '—';
  return Number.isInteger(value) ? value.toFixed(1) : String(Number(value.toFixed(3)));
}

export function isUnauthorized(error: unknown): boolean {
  return error instanceof ApiError && error.status === 401;
}
