// Learning curve: mean final reward per resources version (ordered by creation) and per mode, with ±1 standard
// deviation whiskers clipped to the rewards' range, drawn with uPlot; updates live. The x axis shows short version
// labels (`v3`), thinned or rotated when crowded; hovering a version shows its full resources id and every mode's
// numbers. In the "all runs" view each run gets a band with its name, and the lines of two runs are never joined.
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { labelledIndices, whiskerRange, xAxisLayout, yRange, type AxisLayout } from '../api/curveLayout';
import { runSegments, runTitle, versionLabel, type RunSegment } from '../api/runs';
import { NO_RESOURCES, type CurvePoint, type LearningCurve } from '../api/training';

const MODE_COLORS: Record<string, string> = { train: '#2563eb', val: '#0d9488', test: '#ea580c', none: '#6b7280' };
const MODE_DASH: Record<string, number[] | undefined> = { val: [6, 3], test: [2, 3] };
const HEIGHT = 240;
/** Room above the plot for the run names of the "all runs" view. */
const RUN_NAMES_PX = 18;
const Y_AXIS_SIZE = 48;
/** The y axis with its title (the plot is the chart's width less this). */
const Y_AXIS_PX = Y_AXIS_SIZE + 22;

const colorOf = (mode: string) => MODE_COLORS[mode] ?? '#6b7280';

/** A colour of the current theme (CSS custom property), read when the chart draws: axes follow light and dark. */
const themeColor = (name: string, fallback: string) => () =>
  getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
const AXIS_THEME = {
  stroke: themeColor('--fg-dim', '#6b7280'),
  grid: { stroke: themeColor('--border', '#e5e7eb'), width: 1 },
  ticks: { stroke: themeColor('--border', '#e5e7eb'), width: 1 },
};

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
        ctx.lineWidth = Math.max(1, uPlot.pxRatio);
        modes.forEach((mode, s) => {
          if (!u.series[s + 1].show) return;
          ctx.strokeStyle = colorOf(mode);
          byMode.get(mode)!.forEach((p, i) => {
            if (!p || p.count < 2 || p.std === 0) return;
            const [lo, hi] = whiskerRange(p);
            const x = u.valToPos(i, 'x', true);
            const yLo = u.valToPos(lo, 'y', true);
            const yHi = u.valToPos(hi, 'y', true);
            const w = 4 * uPlot.pxRatio;
            ctx.beginPath();
            ctx.moveTo(x, yLo);
            ctx.lineTo(x, yHi);
            ctx.moveTo(x - w, yLo);
            ctx.lineTo(x + w, yLo);
            ctx.moveTo(x - w, yHi);
            ctx.lineTo(x + w, yHi);
            ctx.stroke();
          });
        });
        ctx.restore();
      },
    },
  };
}

/** A shaded band per run segment, with the run's name above it (the "all runs" view). */
function runBands(segments: RunSegment[]): uPlot.Plugin {
  return {
    hooks: {
      drawClear: (u: uPlot) => {
        const ctx = u.ctx;
        const { top, height } = u.bbox;
        const dark = document.documentElement.dataset.theme === 'dark';
        ctx.save();
        ctx.font = `${11 * uPlot.pxRatio}px system-ui, sans-serif`;
        ctx.textBaseline = 'bottom';
        segments.forEach((seg, k) => {
          const left = u.valToPos(seg.from - 0.5, 'x', true);
          const right = u.valToPos(seg.to + 0.5, 'x', true);
          ctx.fillStyle = k % 2 === 0 ? (dark ? 'rgba(255,255,255,.04)' : 'rgba(37,99,235,.05)') : (dark ? 'rgba(255,255,255,.09)' : 'rgba(13,148,136,.07)');
          ctx.fillRect(left, top, right - left, height);
          ctx.fillStyle = dark ? '#9ca3af' : '#4b5563';
          ctx.save();
          ctx.beginPath();
          ctx.rect(left, 0, right - left, top);
          ctx.clip();
          ctx.fillText(runTitle(seg.run), left + 4 * uPlot.pxRatio, top - 4 * uPlot.pxRatio);
          ctx.restore();
        });
        ctx.restore();
      },
    },
  };
}

/** The gaps (canvas pixels) that keep the lines of two runs apart. */
function runGaps(segments: RunSegment[]): uPlot.Series.GapsRefiner {
  return (u) =>
    segments.slice(1).map((seg, k) => {
      const prev = segments[k];
      return [Math.round(u.valToPos(prev.to, 'x', true)) + 1, Math.round(u.valToPos(seg.from, 'x', true)) - 1] as uPlot.Series.Gap;
    });
}

/** A tooltip following the hovered version: its full resources id and every mode's mean ± std, count and range. */
function tooltip(curve: LearningCurve, byMode: Map<string, (CurvePoint | null)[]>): uPlot.Plugin {
  let tip: HTMLDivElement | null = null;
  return {
    hooks: {
      init: (u: uPlot) => {
        tip = document.createElement('div');
        tip.className = 'curve-tooltip';
        tip.dataset.testid = 'learning-curve-tooltip';
        tip.style.display = 'none';
        u.over.appendChild(tip);
      },
      setCursor: (u: uPlot) => {
        if (!tip) return;
        const idx = u.cursor.idx;
        if (idx === null || idx === undefined || u.cursor.left === undefined || u.cursor.left < 0) {
          tip.style.display = 'none';
          return;
        }
        const id = curve.versions[idx];
        tip.replaceChildren();
        const title = document.createElement('div');
        title.className = 'mono curve-tooltip-title';
        title.textContent = id === NO_RESOURCES ? 'rollouts without resources' : id;
        tip.appendChild(title);
        curve.modes.forEach((mode) => {
          const p = byMode.get(mode)![idx];
          if (!p) return;
          const line = document.createElement('div');
          const dot = document.createElement('span');
          dot.className = 'curve-tooltip-dot';
          dot.style.background = colorOf(mode);
          line.appendChild(dot);
          line.append(`${mode}: ${p.mean.toFixed(3)} ± ${p.std.toFixed(3)} (n=${p.count}, ${p.min.toFixed(2)}–${p.max.toFixed(2)})`);
          tip!.appendChild(line);
        });
        const x = u.valToPos(idx, 'x');
        const right = x > u.over.clientWidth / 2;
        tip.style.display = 'block';
        tip.style.left = right ? '' : `${x + 12}px`;
        tip.style.right = right ? `${u.over.clientWidth - x + 12}px` : '';
        tip.style.top = `${Math.max(0, (u.cursor.top ?? 0) - 10)}px`;
      },
    },
  };
}

function chartOptions(curve: LearningCurve, byMode: Map<string, (CurvePoint | null)[]>, showRuns: boolean, host: HTMLElement): uPlot.Options {
  const labels = curve.versions.map((v) => (v === NO_RESOURCES ? NO_RESOURCES : versionLabel(v)));
  const layout = (u: uPlot): AxisLayout => xAxisLayout(labels, u.width - Y_AXIS_PX);
  const segments = showRuns ? runSegments(curve.versions) : [];
  const [yMin, yMax] = yRange(curve.points);
  return {
    width: Math.max(320, host.clientWidth),
    height: HEIGHT,
    legend: { live: false },
    padding: [showRuns ? RUN_NAMES_PX : null, null, null, null],
    cursor: { drag: { x: false, y: false }, points: { size: 9 } },
    scales: { x: { time: false, range: [-0.5, curve.versions.length - 0.5] }, y: { range: [yMin, yMax] } },
    axes: [
      {
        splits: (u) => labelledIndices(labels.length, layout(u).stride),
        values: (_u, splits) => {
          const shown = splits.map((i) => labels[i] ?? '');
          host.dataset.xLabels = shown.join(' '); // what the axis shows, for tests and tools
          return shown;
        },
        rotate: (u) => {
          const { rotate } = layout(u);
          host.dataset.xRotate = String(rotate);
          return rotate;
        },
        size: (u) => layout(u).size,
        gap: 6,
        ...AXIS_THEME,
      },
      { label: 'mean final reward', labelSize: 18, size: Y_AXIS_SIZE, ...AXIS_THEME },
    ],
    series: [
      { label: 'version' },
      ...curve.modes.map((mode) => ({
        label: mode,
        stroke: colorOf(mode),
        dash: MODE_DASH[mode],
        width: 2,
        spanGaps: !showRuns,
        gaps: showRuns ? runGaps(segments) : undefined,
        points: { size: 7, fill: colorOf(mode) },
      })),
    ],
    plugins: [whiskers(byMode, curve.modes), tooltip(curve, byMode), ...(showRuns ? [runBands(segments)] : [])],
  };
}

export function LearningCurveChart({ curve, showRuns = false }: { curve: LearningCurve; showRuns?: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  const latest = useRef(curve);
  latest.current = curve;
  // Live refreshes return equal curves most of the time: the chart (and a hover) stays unless the data changed.
  const signature = JSON.stringify(curve);
  useEffect(() => {
    const el = host.current;
    const current = latest.current;
    if (!el || current.versions.length === 0) return;
    const { data, byMode } = seriesData(current);
    const plot = new uPlot(chartOptions(current, byMode, showRuns, el), data, el);
    const ro = typeof ResizeObserver !== 'undefined' ? new ResizeObserver(() => plot.setSize({ width: Math.max(320, el.clientWidth), height: HEIGHT })) : null;
    ro?.observe(el);
    // Settings → Theme switches `data-theme` on <html>: redraw with the theme's axis colours.
    const themes = new MutationObserver(() => plot.redraw(false));
    themes.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme'] });
    return () => {
      ro?.disconnect();
      themes.disconnect();
      plot.destroy();
    };
  }, [signature, showRuns]);
  if (curve.versions.length === 0) {
    return <div className="chart-empty dim" data-testid="learning-curve-empty">No rewards reported by finished rollouts yet.</div>;
  }
  const [yMin, yMax] = yRange(curve.points);
  return (
    <div
      ref={host}
      className="learning-curve"
      role="img"
      aria-label="Learning curve: mean final reward per resources version"
      data-testid="learning-curve-chart"
      data-versions={curve.versions.length}
      data-y-range={`${yMin},${yMax}`}
    />
  );
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
