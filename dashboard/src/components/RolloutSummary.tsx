// Rollout summary: status counts and the learning curve; updates live.
import { useState } from 'react';
import { fetchStatusCounts } from '../api/insights';
import { formatStatusLabel } from '../api/format';
import { fetchLearningCurve, isUnauthorized } from '../api/training';
import { ROLLOUT_STATUSES } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { useConfig, useLiveInterval } from '../state/config';
import { Badge } from './common';
import { LearningCurveChart, LearningCurveTable } from './LearningCurve';

export function RolloutSummaryPanel() {
  const { client, config } = useConfig();
  const [live, setLive] = useState(true);
  const pollMs = useLiveInterval(live);
  const q = useQuery(`summary|${client.serverKey}|${config.token}`, async (signal) => {
    const [counts, curve] = await Promise.all([fetchStatusCounts(client, signal), fetchLearningCurve(client, signal)]);
    return { counts, curve };
  }, { pollMs });
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
        <div className="error-text">
          {isUnauthorized(q.error) ? 'Summary unavailable: the store requires an API token (Settings → API token).' : 'Summary unavailable.'}
        </div>
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
            <div className="small dim">Learning curve: mean final reward of finished rollouts per resources version (in creation order) and mode, ±1 std</div>
            {q.data ? (
              <>
                <LearningCurveChart curve={q.data.curve} />
                <LearningCurveTable curve={q.data.curve} />
              </>
            ) : (
              <div className="skeleton" style={{ height: 220 }} />
            )}
          </div>
        </div>
      )}
    </section>
  );
}
