// Rollout summary: status counts and a reward-over-time chart; updates live.
import { useState } from 'react';
import { fetchRolloutSummary, type RewardPoint } from '../api/insights';
import { formatDateTime, formatStatusLabel } from '../api/format';
import { ROLLOUT_STATUSES } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { useConfig, useLiveInterval } from '../state/config';
import { Badge } from './common';

export function RewardChart({ points }: { points: RewardPoint[] }) {
  const W = 640;
  const H = 180;
  const P = { l: 44, r: 12, t: 10, b: 26 };
  if (points.length === 0) {
    return <div className="chart-empty dim" data-testid="reward-chart-empty">No rewards reported by finished rollouts yet.</div>;
  }
  const xs = points.map((p) => p.time);
  const ys = points.map((p) => p.reward);
  let x0 = Math.min(...xs);
  let x1 = Math.max(...xs);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  let y0 = Math.min(0, ...ys);
  let y1 = Math.max(...ys);
  if (y1 === y0) y1 = y0 + 1;
  const sx = (x: number) => P.l + ((x - x0) / (x1 - x0)) * (W - P.l - P.r);
  const sy = (y: number) => H - P.b - ((y - y0) / (y1 - y0)) * (H - P.t - P.b);
  const path = points.map((p, i) => `${i ? 'L' : 'M'}${sx(p.time).toFixed(1)},${sy(p.reward).toFixed(1)}`).join(' ');
  const ticks = [y0, (y0 + y1) / 2, y1];
  return (
    <svg className="reward-chart" viewBox={`0 0 ${W} ${H}`} role="img" aria-label="Reward over time" data-testid="reward-chart" data-points={points.length}>
      {ticks.map((t) => (
        <g key={t}>
          <line x1={P.l} x2={W - P.r} y1={sy(t)} y2={sy(t)} className="grid" />
          <text x={P.l - 6} y={sy(t) + 4} textAnchor="end" className="axis">{Number(t.toFixed(2))}</text>
        </g>
      ))}
      <text x={P.l} y={H - 6} className="axis">{formatDateTime(x0)}</text>
      <text x={W - P.r} y={H - 6} textAnchor="end" className="axis">{formatDateTime(x1)}</text>
      <path d={path} className="line" />
      {points.map((p) => (
        <circle key={p.rolloutId} cx={sx(p.time)} cy={sy(p.reward)} r={3.5} className={`dot dot-${p.status}`} data-testid="reward-point">
          <title>{`${p.rolloutId}: ${p.reward} (${formatDateTime(p.time)})`}</title>
        </circle>
      ))}
    </svg>
  );
}

export function RolloutSummaryPanel() {
  const { client, config } = useConfig();
  const [live, setLive] = useState(true);
  const pollMs = useLiveInterval(live);
  const q = useQuery(`summary|${client.serverKey}|${config.token}`, (signal) => fetchRolloutSummary(client, signal), { pollMs });
  const counts = q.data?.counts;
  return (
    <section className="card summary" data-testid="rollout-summary">
      <div className="card-header">
        <h2>Summary</h2>
        <span className="spacer" />
        {q.isFetching && <span className="spinner small" aria-label="Refreshing summary" />}
        <label className="check small">
          <input type="checkbox" checked={live} onChange={(e) => setLive(e.target.checked)} aria-label="Live updates" /> Live
        </label>
      </div>
      {q.error && !q.data ? (
        <div className="error-text">Summary unavailable.</div>
      ) : (
        <div className="summary-body">
          <div className="status-counts" data-testid="status-counts">
            <div className="count-tile total" data-testid="count-total">
              <div className="count-value">{counts?.total ?? '…'}</div>
              <div className="dim small">Total</div>
            </div>
            {ROLLOUT_STATUSES.map((s) => (
              <div className="count-tile" key={s} data-testid={`count-${s}`}>
                <div className="count-value">{counts ? counts[s] : '…'}</div>
                <Badge kind="rollout" value={s}>{formatStatusLabel(s)}</Badge>
              </div>
            ))}
          </div>
          <div className="chart-box">
            <div className="small dim">Reward over time (final reward of the latest 50 finished rollouts)</div>
            {q.data ? <RewardChart points={q.data.rewards} /> : <div className="skeleton" style={{ height: 180 }} />}
          </div>
        </div>
      )}
    </section>
  );
}
