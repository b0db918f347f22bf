// Learning curve: mean final reward per resources version (ordered by creation) and per mode, with counts and spread
// (±1 standard deviation whiskers, min–max in the table), drawn with uPlot; updates live.
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { CurvePoint, LearningCurve } from '../api/training';

const MODE_COLORS: Record<string, string> = { train: '#2563eb', val: '#0d9488', test: '#ea580c', none: '#6b7280' };

function seriesData(curve: LearningCurve): { data: uPlot.AlignedData; byMode: Map<string, (CurvePoint | null)[]> } {
  const index = new Map(curve.versions.map((v, i) => [v, i]));
  const byMode = new Map<string, (CurvePoint | null)[]>();
  for (const mode of curve.modes) byMode.set(mode, curve.versions.map(() => null));
  for (const p of curve.points) byMode.get(p.mode)![index.get(p.resourcesId)!] = p;
  const xs = curve.versions.map((_, i) => i);
  const ys = curve.modes.map((m) => byMode.get(m)!.map((p) => (p ? p.mean : null)));
  return { data: [xs, ...ys] as uPlot.AlignedData, byMode };
}

function whiskers(byMode: Map<string, (CurvePoint | null)[]>, modes: string[]): uPlot.Plugin {
  return {
    hooks: {
      draw: (u: uPlot) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.lineWidth = Math.max(1, devicePixelRatio);
        modes.forEach((mode, s) => {
          if (!u.series[s + 1].show) return;
          ctx.strokeStyle = MODE_COLORS[mode] ?? '#6b7280';
          byMode.get(mode)!.forEach((p, i) => {
            if (!p || p.count < 2) return;
            const x = u.valToPos(i, 'x', true);
            const lo = u.valToPos(p.mean - p.std, 'y', true);
            const hi = u.valToPos(p.mean + p.std, 'y', true);
            const w = 4 * devicePixelRatio;
            ctx.beginPath();
            ctx.moveTo(x, lo);
            ctx.lineTo(x, hi);
            ctx.moveTo(x - w, lo);
            ctx.lineTo(x + w, lo);
            ctx.moveTo(x - w, hi);
            ctx.lineTo(x + w, hi);
            ctx.stroke();
          });
        });
        ctx.restore();
      },
    },
  };
}

export function LearningCurveChart({ curve }: { curve: LearningCurve }) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = host.current;
    if (!el || curve.versions.length === 0) return;
    const { data, byMode } = seriesData(curve);
    const ys = curve.points.flatMap((p) => [p.mean - p.std, p.mean + p.std, p.min, p.max]);
    const yMin = Math.min(0, ...ys);
    const yMax = Math.max(1, ...ys);
    const opts: uPlot.Options = {
      width: Math.max(320, el.clientWidth),
      height: 220,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: false, range: [-0.5, curve.versions.length - 0.5] }, y: { range: [yMin, yMax] } },
      axes: [
        {
          splits: () => curve.versions.map((_, i) => i),
          values: (_u, splits) => splits.map((i) => curve.versions[i] ?? ''),
          gap: 6,
          size: 40,
        },
        { label: 'mean final reward', labelSize: 18, size: 48 },
      ],
      series: [
        { label: 'version', value: (_u, i) => (i === null || i === undefined ? '—' : curve.versions[i] ?? '—') },
        ...curve.modes.map((mode) => ({
          label: mode,
          stroke: MODE_COLORS[mode] ?? '#6b7280',
          width: 2,
          spanGaps: true,
          points: { size: 7, fill: MODE_COLORS[mode] ?? '#6b7280' },
          value: (_u: uPlot, v: number | null, _s: number, i: number | null) => {
            const p = i === null ? null : byMode.get(mode)![i];
            return v === null || !p ? '—' : `${v.toFixed(3)} ± ${p.std.toFixed(3)} (n=${p.count})`;
          },
        })),
      ],
      plugins: [whiskers(byMode, curve.modes)],
    };
    const plot = new uPlot(opts, data, el);
    const ro = typeof ResizeObserver !== 'undefined' ? new ResizeObserver(() => plot.setSize({ width: Math.max(320, el.clientWidth), height: 220 })) : null;
    ro?.observe(el);
    return () => {
      ro?.disconnect();
      plot.destroy();
    };
  }, [curve]);
  if (curve.versions.length === 0) {
    return <div className="chart-empty dim" data-testid="learning-curve-empty">No rewards reported by finished rollouts yet.</div>;
  }
  return <div ref={host} className="learning-curve" role="img" aria-label="Learning curve: mean final reward per resources version" data-testid="learning-curve-chart" data-versions={curve.versions.length} />;
}

export function LearningCurveTable({ curve }: { curve: LearningCurve }) {
  return (
    <details className="curve-table" data-testid="learning-curve-details">
      <summary className="small dim">Per version and mode ({curve.rewarded} rewarded rollouts{curve.unrewarded ? `, ${curve.unrewarded} without reward` : ''})</summary>
      <table className="mini-table" data-testid="learning-curve-table">
        <thead>
          <tr><th>Resources</th><th>Mode</th><th>Rollouts</th><th>Mean</th><th>Std</th><th>Min</th><th>Max</th></tr>
        </thead>
        <tbody>
          {curve.points.map((p) => (
            <tr key={`${p.resourcesId}|${p.mode}`} data-testid="learning-curve-row" data-resources-id={p.resourcesId} data-mode={p.mode}>
              <td className="mono">{p.resourcesId}</td>
              <td>{p.mode}</td>
              <td data-column="count">{p.count}</td>
              <td data-column="mean">{p.mean.toFixed(3)}</td>
              <td data-column="std">{p.std.toFixed(3)}</td>
              <td data-column="min">{p.min.toFixed(3)}</td>
              <td data-column="max">{p.max.toFixed(3)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  );
}
