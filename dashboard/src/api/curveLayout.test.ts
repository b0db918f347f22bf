import { describe, expect, it } from 'vitest';
import { LABEL_CHAR_PX, labelledIndices, whiskerRange, xAxisLayout, yRange } from './curveLayout';
import { buildLearningCurve, type RewardRow } from './training';

const row = (id: string, reward: number): RewardRow => ({
  rolloutId: id, attemptId: null, resourcesId: 'apo-aaaaaa-v0', mode: 'train', status: 'succeeded', startTime: 1, endTime: 2, reward,
});

describe('whiskers', () => {
  it('are clipped to the rewards they summarise', () => {
    // 0/1 rewards, mean 0.75: the std (0.433) would draw the whisker to 1.183, above every reward.
    const [p] = buildLearningCurve([row('a', 1), row('b', 1), row('c', 1), row('d', 0)], new Map()).points;
    expect(p.mean).toBe(0.75);
    expect(p.mean + p.std).toBeGreaterThan(1);
    const [lo, hi] = whiskerRange(p);
    expect(hi).toBe(1);
    expect(lo).toBeCloseTo(0.75 - Math.sqrt(0.1875));
    // Mean near the bottom: the lower end stops at the minimum.
    expect(whiskerRange({ mean: 0.1, std: 0.3, min: 0, max: 0.9 })).toEqual([0, 0.4]);
    // Inside the range: plain mean ± std.
    expect(whiskerRange({ mean: 0.5, std: 0.1, min: 0, max: 1 })).toEqual([0.4, 0.6]);
  });

  it('the y range is the rewards\' range widened to 0..1, whiskers never widen it', () => {
    expect(yRange([])).toEqual([0, 1]);
    expect(yRange([{ min: 0.2, max: 0.9 }])).toEqual([0, 1]);
    expect(yRange([{ min: -2, max: 0.5 }, { min: 0, max: 3 }])).toEqual([-2, 3]);
  });
});

describe('x axis', () => {
  it('labels every version flat when they fit', () => {
    expect(xAxisLayout(['v0', 'v1', 'v2'], 600)).toEqual({ stride: 1, rotate: 0, size: 36 });
    expect(xAxisLayout(['rs-e2e-002', 'rs-e2e-003'], 800)).toMatchObject({ stride: 1, rotate: 0 });
  });

  it('rotates long labels when crowded, and thins them when even that does not fit', () => {
    const long = Array.from({ length: 30 }, (_, i) => `…6f3a9c2e1b${i}`);
    const rotated = xAxisLayout(long, 1000); // 33 px per label: too narrow flat (~100 px), enough rotated (22 px)
    expect(rotated.rotate).toBe(-45);
    expect(rotated.stride).toBe(1);
    expect(rotated.size).toBeGreaterThan(Math.floor(long[0].length * LABEL_CHAR_PX * Math.SQRT1_2));
    const crowded = xAxisLayout(long, 300); // 10 px per label
    expect(crowded).toMatchObject({ rotate: -45, stride: 3 });
  });

  it('thins short labels without rotating them', () => {
    const many = Array.from({ length: 200 }, (_, i) => `v${i}`);
    const layout = xAxisLayout(many, 800); // 4 px per label, `v199` needs 42 px
    expect(layout.rotate).toBe(0);
    expect(layout.stride).toBe(Math.ceil((4 * LABEL_CHAR_PX + 14) / 4));
    // Labelled versions never overlap: one label per `stride` slots is at least as wide as a label.
    expect((800 / 200) * layout.stride).toBeGreaterThanOrEqual(4 * LABEL_CHAR_PX + 14);
  });

  it('always labels the latest version, then every stride-th before it', () => {
    expect(labelledIndices(10, 3)).toEqual([0, 3, 6, 9]);
    expect(labelledIndices(9, 3)).toEqual([2, 5, 8]);
    expect(labelledIndices(4, 1)).toEqual([0, 1, 2, 3]);
    expect(labelledIndices(1, 5)).toEqual([0]);
    expect(labelledIndices(0, 2)).toEqual([]);
  });
});
