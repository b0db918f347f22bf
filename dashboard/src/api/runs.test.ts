import { describe, expect, it } from 'vitest';
import {
  ALL_RUNS,
  OTHER_RUN,
  groupRuns,
  latestRun,
  parseRunVersion,
  resolveRunSelection,
  rowsOfRun,
  runOf,
  runSegments,
  runTitle,
  versionLabel,
} from './runs';
import { buildLearningCurve, NO_RESOURCES, type RewardRow } from './training';

const row = (id: string, resourcesId: string | null, reward: number | null, start = 1, mode: RewardRow['mode'] = 'train'): RewardRow => ({
  rolloutId: id, attemptId: `at-${id}`, resourcesId, mode, status: 'succeeded', startTime: start, endTime: start + 1, reward,
});

describe('resources ids of runs', () => {
  it('parses `<run_id>-v<n>`', () => {
    expect(parseRunVersion('apo-42a386-v3')).toEqual({ run: 'apo-42a386', version: 3 });
    expect(parseRunVersion('grpo-5d2e7a-v12')).toEqual({ run: 'grpo-5d2e7a', version: 12 });
    expect(parseRunVersion('my-run-v0')).toEqual({ run: 'my-run', version: 0 });
    for (const id of ['rs-e2e-001', 'v3', 'apo-42a386-v', 'apo-42a386-v3b', 'rs-6f3a9c2e1b4d']) expect(parseRunVersion(id)).toBeNull();
    expect(runOf('apo-42a386-v3')).toBe('apo-42a386');
    expect(runOf('rs-e2e-001')).toBe(OTHER_RUN);
    expect(runOf(null)).toBe(OTHER_RUN);
  });

  it('labels versions shortly: `v3`, short ids as they are, long ones by their tail', () => {
    expect(versionLabel('apo-42a386-v3')).toBe('v3');
    expect(versionLabel('grpo-5d2e7a-v120')).toBe('v120');
    expect(versionLabel('rs-e2e-002')).toBe('rs-e2e-002');
    expect(versionLabel('resources-6f3a9c2e1b4d')).toBe('…f3a9c2e1b4d');
    expect(versionLabel('resources-6f3a9c2e1b4d').length).toBe(12);
    expect(versionLabel('abcdefghij', 6)).toBe('…fghij');
  });

  it('titles', () => {
    expect([runTitle(ALL_RUNS), runTitle(OTHER_RUN), runTitle('apo-42a386')]).toEqual(['All runs', 'Other resources', 'apo-42a386']);
  });
});

describe('grouping versions into runs', () => {
  // Two APO runs in one store, plus resources that follow no convention and rollouts without resources.
  const created = new Map([
    ['apo-aaaaaa-v0', 10], ['apo-aaaaaa-v1', 20], ['apo-aaaaaa-v2', 30],
    ['rs-seed', 5],
    ['apo-bbbbbb-v0', 100], ['apo-bbbbbb-v1', 110],
  ]);
  const rows = [
    row('a0', 'apo-aaaaaa-v0', 0.25), row('a1', 'apo-aaaaaa-v1', 0.5), row('a2', 'apo-aaaaaa-v2', 1), row('a2b', 'apo-aaaaaa-v2', null),
    row('b0', 'apo-bbbbbb-v0', 0.25), row('b1', 'apo-bbbbbb-v1', 0.5), row('b1b', 'apo-bbbbbb-v1', 0.75),
    row('s', 'rs-seed', 0.1), row('n', null, 0.3, 1),
  ];

  it('groups by run in order of their start, the other group last, versions in creation order', () => {
    const runs = groupRuns(rows, created);
    expect(runs.map((g) => [g.id, g.versions, g.rollouts])).toEqual([
      ['apo-aaaaaa', ['apo-aaaaaa-v0', 'apo-aaaaaa-v1', 'apo-aaaaaa-v2'], 4],
      ['apo-bbbbbb', ['apo-bbbbbb-v0', 'apo-bbbbbb-v1'], 3],
      [OTHER_RUN, ['rs-seed'], 2],
    ]);
    expect(runs[0].firstTime).toBe(10);
    expect(runs[0].lastTime).toBe(30);
  });

  it('defaults to the run holding the latest version, keeps a requested one, and knows unknown ones', () => {
    const runs = groupRuns(rows, created);
    expect(latestRun(runs)).toBe('apo-bbbbbb');
    expect(resolveRunSelection(null, runs)).toEqual({ selected: 'apo-bbbbbb', known: true });
    expect(resolveRunSelection('apo-aaaaaa', runs)).toEqual({ selected: 'apo-aaaaaa', known: true });
    expect(resolveRunSelection(ALL_RUNS, runs)).toEqual({ selected: ALL_RUNS, known: true });
    expect(resolveRunSelection('apo-cccccc', runs)).toEqual({ selected: 'apo-cccccc', known: false });
    expect(latestRun([])).toBe(ALL_RUNS);
    // Versions of unknown creation time (not in the resources list) date from their first rollout.
    const late = groupRuns([...rows, row('c0', 'grpo-cccccc-v0', 1, 500)], created);
    expect(latestRun(late)).toBe('grpo-cccccc');
  });

  it('a run\'s curve does not continue another run\'s: the second run starts again at its own v0', () => {
    const runs = groupRuns(rows, created);
    const first = buildLearningCurve(rowsOfRun(rows, runs[0].id), created);
    const second = buildLearningCurve(rowsOfRun(rows, runs[1].id), created);
    expect(first.versions).toEqual(['apo-aaaaaa-v0', 'apo-aaaaaa-v1', 'apo-aaaaaa-v2']);
    expect(first.points.map((p) => p.mean)).toEqual([0.25, 0.5, 1]);
    expect(first.unrewarded).toBe(1);
    expect(second.versions).toEqual(['apo-bbbbbb-v0', 'apo-bbbbbb-v1']);
    expect(second.points.map((p) => p.mean)).toEqual([0.25, 0.625]);
    const other = buildLearningCurve(rowsOfRun(rows, OTHER_RUN), created);
    expect(other.versions).toEqual([NO_RESOURCES, 'rs-seed']);
    expect(rowsOfRun(rows, ALL_RUNS)).toHaveLength(rows.length);
  });

  it('segments the all-runs axis into consecutive runs', () => {
    const all = buildLearningCurve(rows, created);
    expect(all.versions).toEqual([NO_RESOURCES, 'rs-seed', 'apo-aaaaaa-v0', 'apo-aaaaaa-v1', 'apo-aaaaaa-v2', 'apo-bbbbbb-v0', 'apo-bbbbbb-v1']);
    expect(runSegments(all.versions)).toEqual([
      { run: OTHER_RUN, from: 0, to: 1 },
      { run: 'apo-aaaaaa', from: 2, to: 4 },
      { run: 'apo-bbbbbb', from: 5, to: 6 },
    ]);
    expect(runSegments([])).toEqual([]);
  });
});
