// Geometry of the learning curve that does not need a canvas: whiskers clipped to the data, the y range and a
// readable x axis (thinned and, for long labels, rotated when the versions are crowded).
import type { CurvePoint } from './training';

/** The ±1 standard deviation whisker of a point, clipped to the rewards it summarises: never above their maximum nor
 * below their minimum (0/1 rewards with mean 0.75 give 0.317..1, not 0.317..1.183). */
export function whiskerRange(p: Pick<CurvePoint, 'mean' | 'std' | 'min' | 'max'>): [number, number] {
  return [Math.max(p.min, p.mean - p.std), Math.min(p.max, p.mean + p.std)];
}

/** The y range: the rewards' range, widened to include 0..1 (the usual reward scale). */
export function yRange(points: readonly Pick<CurvePoint, 'min' | 'max'>[]): [number, number] {
  let lo = 0;
  let hi = 1;
  for (const p of points) {
    lo = Math.min(lo, p.min);
    hi = Math.max(hi, p.max);
  }
  return [lo, hi];
}

export interface AxisLayout {
  /** Show every `stride`-th label, counted back from the last version (the latest one is always labelled). */
  stride: number;
  /** Label rotation in degrees (0 or -45). */
  rotate: number;
  /** Height of the axis in CSS pixels. */
  size: number;
}

/** Approximate width of one label character (11 px sans-serif) and the space a label needs around it. */
export const LABEL_CHAR_PX = 7;
const LABEL_PAD_PX = 14;
/** Distance between the baselines of two labels rotated by 45° for them not to overlap. */
const ROTATED_PITCH_PX = 22;
const FLAT_AXIS_PX = 36;

/** How to label `labels` on an axis `widthPx` wide: every label flat when they fit; long labels (over 4 characters)
 * rotated by 45° when that makes room; thinned (every n-th) when even that does not fit. */
export function xAxisLayout(labels: readonly string[], widthPx: number): AxisLayout {
  const n = Math.max(1, labels.length);
  const longest = labels.reduce((m, l) => Math.max(m, l.length), 1);
  const flat = longest * LABEL_CHAR_PX + LABEL_PAD_PX;
  const slot = Math.max(1, widthPx) / n;
  if (flat <= slot) return { stride: 1, rotate: 0, size: FLAT_AXIS_PX };
  if (longest > 4) {
    return { stride: Math.ceil(ROTATED_PITCH_PX / slot), rotate: -45, size: Math.ceil(longest * LABEL_CHAR_PX * Math.SQRT1_2) + 24 };
  }
  return { stride: Math.ceil(flat / slot), rotate: 0, size: FLAT_AXIS_PX };
}

/** Indices of the labelled versions: every `stride`-th, counted back from the last one. */
export function labelledIndices(count: number, stride: number): number[] {
  const out: number[] = [];
  for (let i = count - 1; i >= 0; i -= Math.max(1, stride)) out.push(i);
  return out.reverse();
}
