// Training runs in one store: resources versions grouped by the project's resources-id convention `<run_id>-v<n>`
// (APO publishes `apo-<6 hex>-v<n>`, GRPO `grpo-<6 hex>-v<n>`), so that two runs never share one learning curve.
// Ids that do not follow the convention (and rollouts without resources) form one "other" group.
import { NO_RESOURCES, type RewardRow } from './training';

/** Selection value showing every run on one axis. */
export const ALL_RUNS = 'all';
/** Group of the resources ids that do not follow `<run_id>-v<n>` (and of rollouts without resources). */
export const OTHER_RUN = 'other';

const RUN_VERSION = /^(.+)-v(\d+)$/;

/** The run and version number of a resources id that follows `<run_id>-v<n>`; null otherwise. */
export function parseRunVersion(resourcesId: string): { run: string; version: number } | null {
  const m = RUN_VERSION.exec(resourcesId);
  return m ? { run: m[1], version: Number(m[2]) } : null;
}

/** The run a resources id belongs to (`null`: a rollout without resources). */
export function runOf(resourcesId: string | null): string {
  if (resourcesId === null) return OTHER_RUN;
  return parseRunVersion(resourcesId)?.run ?? OTHER_RUN;
}

/** A short x-axis label: `v3` for `<run_id>-v3`; other ids as they are up to `maxChars`, else `…` and their tail. */
export function versionLabel(resourcesId: string, maxChars = 12): string {
  const parsed = parseRunVersion(resourcesId);
  if (parsed) return `v${parsed.version}`;
  if (resourcesId.length <= maxChars) return resourcesId;
  return `…${resourcesId.slice(resourcesId.length - (maxChars - 1))}`;
}

export interface RunGroup {
  /** The run id (`apo-42a386`) or {@link OTHER_RUN}. */
  id: string;
  /** Resources ids of the run, in creation order. */
  versions: string[];
  /** Finished rollouts of the run (with or without a reward). */
  rollouts: number;
  /** When the run's first and latest versions were created (epoch seconds). */
  firstTime: number;
  lastTime: number;
}

/** When each version appeared: its creation time, else the first start time among its rollouts. */
function versionTimes(rows: readonly RewardRow[], createTimes: ReadonlyMap<string, number>): Map<string | null, number> {
  const times = new Map<string | null, number>();
  rows.forEach((r, i) => {
    const created = r.resourcesId === null ? undefined : createTimes.get(r.resourcesId);
    times.set(r.resourcesId, created ?? Math.min(times.get(r.resourcesId) ?? Infinity, r.startTime ?? i));
  });
  return times;
}

/** Group the finished rollouts' versions into runs, ordered by when each run started (the "other" group last). */
export function groupRuns(rows: readonly RewardRow[], createTimes: ReadonlyMap<string, number>): RunGroup[] {
  const times = versionTimes(rows, createTimes);
  const groups = new Map<string, RunGroup>();
  const counted = new Map<string, number>();
  for (const r of rows) {
    const id = runOf(r.resourcesId);
    counted.set(id, (counted.get(id) ?? 0) + 1);
  }
  const ordered = [...times.entries()].sort((a, b) => a[1] - b[1] || String(a[0]).localeCompare(String(b[0])));
  for (const [resourcesId, t] of ordered) {
    const id = runOf(resourcesId);
    let g = groups.get(id);
    if (!g) {
      g = { id, versions: [], rollouts: counted.get(id) ?? 0, firstTime: t, lastTime: t };
      groups.set(id, g);
    }
    if (resourcesId !== null) g.versions.push(resourcesId);
    g.lastTime = Math.max(g.lastTime, t);
  }
  return [...groups.values()].sort((a, b) => Number(a.id === OTHER_RUN) - Number(b.id === OTHER_RUN) || a.firstTime - b.firstTime);
}

/** The run shown by default: the one holding the most recently created version ({@link ALL_RUNS} when none). */
export function latestRun(runs: readonly RunGroup[]): string {
  let best: RunGroup | null = null;
  for (const g of runs) if (!best || g.lastTime > best.lastTime || (g.lastTime === best.lastTime && best.id === OTHER_RUN)) best = g;
  return best?.id ?? ALL_RUNS;
}

export interface RunSelection {
  /** What the curve shows: a run id, {@link OTHER_RUN} or {@link ALL_RUNS}. */
  selected: string;
  /** False when the requested run is not (or not yet) in the store. */
  known: boolean;
}

/** The requested selection (from the URL) if any, else the latest run. */
export function resolveRunSelection(requested: string | null, runs: readonly RunGroup[]): RunSelection {
  if (!requested) return { selected: latestRun(runs), known: true };
  if (requested === ALL_RUNS) return { selected: ALL_RUNS, known: true };
  return { selected: requested, known: runs.some((g) => g.id === requested) };
}

/** The reward rows of the selected run (every row for {@link ALL_RUNS}). */
export function rowsOfRun(rows: readonly RewardRow[], selected: string): RewardRow[] {
  if (selected === ALL_RUNS) return [...rows];
  return rows.filter((r) => runOf(r.resourcesId) === selected);
}

/** Display name of a run selection. */
export function runTitle(id: string): string {
  if (id === ALL_RUNS) return 'All runs';
  if (id === OTHER_RUN) return 'Other resources';
  return id;
}

export interface RunSegment {
  run: string;
  /** Index of the segment's first and last version on the x axis (inclusive). */
  from: number;
  to: number;
}

/** Consecutive versions of the same run on the x axis (the "all runs" view draws a band per segment and does not
 * join the lines of two runs). */
export function runSegments(versions: readonly string[]): RunSegment[] {
  const out: RunSegment[] = [];
  versions.forEach((v, i) => {
    const run = runOf(v === NO_RESOURCES ? null : v);
    const last = out[out.length - 1];
    if (last && last.run === run) last.to = i;
    else out.push({ run, from: i, to: i });
  });
  return out;
}
