// Beyond the reference: rollout summary (status counts, reward over time) and the trace waterfall layout.
import type { ApiClient } from './client';
import { fetchRollouts, fetchSpans } from './queries';
import { ROLLOUT_STATUSES, type Rollout, type RolloutStatus, type Span } from './types';

// ---------------------------------------------------------------------------------------------------------------
// Rewards (runtime spec: emitter `get_reward_value`).

function toNumber(v: unknown): number | null {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  return null;
}

/** Reward carried by a span, or null: v0.3 `agentlightning.reward.0.value`, AgentOps output, v0.2 `reward`. */
export function getRewardValue(span: Pick<Span, 'name' | 'attributes'>): number | null {
  const attrs = span.attributes ?? {};
  if ('agentlightning.reward.0.value' in attrs) return toNumber(attrs['agentlightning.reward.0.value']);
  for (const key of ['agentops.task.output', 'agentops.entity.output']) {
    let v = attrs[key];
    if (typeof v === 'string') {
      try {
        v = JSON.parse(v);
      } catch {
        continue;
      }
    }
    if (v && typeof v === 'object' && (v as { type?: unknown }).type === 'reward') {
      return toNumber((v as { value?: unknown }).value);
    }
  }
  if ((span.name === 'agentlightning.annotation' || span.name === 'agentlightning.reward') && 'reward' in attrs) {
    return toNumber(attrs.reward);
  }
  return null;
}

/** The reward of the last span (by sequence id) that carries one. */
export function findFinalReward(spans: readonly Span[]): number | null {
  const ordered = [...spans].sort((a, b) => a.sequenceId - b.sequenceId);
  for (let i = ordered.length - 1; i >= 0; i--) {
    const r = getRewardValue(ordered[i]);
    if (r !== null) return r;
  }
  return null;
}

export interface RewardPoint {
  rolloutId: string;
  time: number;
  reward: number;
  status: RolloutStatus;
}

export type StatusCounts = Record<RolloutStatus, number> & { total: number };

export interface RolloutSummary {
  counts: StatusCounts;
  rewards: RewardPoint[];
}

async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  });
  await Promise.all(workers);
  return out;
}

export async function fetchStatusCounts(client: ApiClient, signal?: AbortSignal): Promise<StatusCounts> {
  const totals = await Promise.all(
    ROLLOUT_STATUSES.map((status) =>
      fetchRollouts(client, { limit: 1, offset: 0, sortBy: 'start_time', sortOrder: 'desc', statusIn: [status] }, signal).then(
        (r) => r.total,
      ),
    ),
  );
  const counts = { total: 0 } as StatusCounts;
  ROLLOUT_STATUSES.forEach((s, i) => {
    counts[s] = totals[i];
    counts.total += totals[i];
  });
  return counts;
}

/** Final reward per finished attempt (`<server>|<rollout>|<attempt>`): finished attempts do not change, so every
 * poll only fetches the spans of rollouts that finished since the previous one. */
const rewardCache = new Map<string, number | null>();

export function clearRewardCache(): void {
  rewardCache.clear();
}

/** Final rewards of the `limit` most recently finished rollouts, oldest first. Only reward-carrying span names
 * (`agentlightning.*`: v0.3 annotations and v0.2 reward spans) are fetched, not the (large) LLM spans. */
export async function fetchRewardSeries(client: ApiClient, limit = 50, signal?: AbortSignal): Promise<RewardPoint[]> {
  const finished = await fetchRollouts(
    client,
    { limit, offset: 0, sortBy: 'end_time', sortOrder: 'desc', statusIn: ['succeeded', 'failed'] },
    signal,
  );
  const points = await mapLimited(finished.items, 6, async (r: Rollout): Promise<RewardPoint | null> => {
    const attemptId = r.attempt?.attemptId ?? null;
    const key = `${client.serverKey}|${r.rolloutId}|${attemptId}`;
    let reward = rewardCache.get(key);
    if (reward === undefined) {
      const spans = await fetchSpans(
        client,
        {
          rolloutId: r.rolloutId,
          attemptId,
          limit: -1,
          offset: 0,
          sortBy: 'sequence_id',
          sortOrder: 'asc',
          searchTerm: 'agentlightning.',
        },
        signal,
      );
      reward = findFinalReward(spans.items);
      rewardCache.set(key, reward);
    }
    const time = r.endTime ?? r.attempt?.endTime ?? r.startTime;
    if (reward === null || time === null) return null;
    return { rolloutId: r.rolloutId, time, reward, status: r.status };
  });
  return points.filter((p): p is RewardPoint => p !== null).sort((a, b) => a.time - b.time);
}

export async function fetchRolloutSummary(client: ApiClient, signal?: AbortSignal): Promise<RolloutSummary> {
  const [counts, rewards] = await Promise.all([fetchStatusCounts(client, signal), fetchRewardSeries(client, 50, signal)]);
  return { counts, rewards };
}

// ---------------------------------------------------------------------------------------------------------------
// Waterfall layout.

export interface WaterfallRow {
  span: Span;
  depth: number;
  /** Offset of the bar start from the trace start, in seconds. */
  offset: number;
  /** Bar length in seconds (open spans extend to the end of the timeline). */
  duration: number;
  open: boolean;
  hasChildren: boolean;
}

export interface WaterfallLayout {
  rows: WaterfallRow[];
  start: number;
  end: number;
  total: number;
}

/** Depth-first rows (children under their parent, ordered by start time then sequence id). */
export function buildWaterfall(spans: readonly Span[], nowSeconds: number = Date.now() / 1000): WaterfallLayout {
  if (spans.length === 0) return { rows: [], start: 0, end: 0, total: 0 };
  const times: number[] = [];
  for (const s of spans) {
    if (s.startTime !== null) times.push(s.startTime);
    if (s.endTime !== null) times.push(s.endTime);
  }
  const start = times.length ? Math.min(...times) : nowSeconds;
  const hasOpen = spans.some((s) => s.endTime === null);
  let end = times.length ? Math.max(...times) : start;
  if (hasOpen) end = Math.max(end, Math.min(nowSeconds, end + 3600));
  const total = Math.max(end - start, 1e-6);

  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map<string | null, Span[]>();
  for (const s of spans) {
    const parent = s.parentId && ids.has(s.parentId) && s.parentId !== s.spanId ? s.parentId : null;
    const list = children.get(parent) ?? [];
    list.push(s);
    children.set(parent, list);
  }
  const order = (a: Span, b: Span) =>
    (a.startTime ?? Infinity) - (b.startTime ?? Infinity) || a.sequenceId - b.sequenceId;
  const rows: WaterfallRow[] = [];
  const seen = new Set<string>();
  const visit = (s: Span, depth: number) => {
    if (seen.has(s.spanId)) return;
    seen.add(s.spanId);
    const kids = (children.get(s.spanId) ?? []).slice().sort(order);
    const spanStart = s.startTime ?? start;
    const spanEnd = s.endTime ?? end;
    rows.push({
      span: s,
      depth,
      offset: spanStart - start,
      duration: Math.max(0, spanEnd - spanStart),
      open: s.endTime === null,
      hasChildren: kids.length > 0,
    });
    for (const k of kids) visit(k, depth + 1);
  };
  for (const root of (children.get(null) ?? []).slice().sort(order)) visit(root, 0);
  // Cycles (a → b → a) have no root: show the remaining spans at depth 0.
  for (const s of spans.slice().sort(order)) visit(s, 0);
  return { rows, start, end, total };
}

/** Flatten span attributes for display: [key, JSON-ish value] sorted by key. */
export function attributeEntries(attributes: Record<string, unknown>): [string, string][] {
  return Object.keys(attributes)
    .sort()
    .map((k) => {
      const v = attributes[k];
      return [k, typeof v === 'string' ? v : JSON.stringify(v)];
    });
}
