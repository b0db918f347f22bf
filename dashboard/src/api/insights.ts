// Beyond the reference: rollout status counts and the trace waterfall layout.
import type { ApiClient } from './client';
import { fetchRollouts } from './queries';
import { ROLLOUT_STATUSES, type RolloutStatus, type Span } from './types';

// ---------------------------------------------------------------------------------------------------------------
// Status counts (final rewards come from the store's export route: see training.ts).

export type StatusCounts = Record<RolloutStatus, number> & { total: number };

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
