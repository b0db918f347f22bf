// Rollout summary: status counts and the learning curve of one run (picked in the URL's `run` query parameter,
// the latest run by default); updates live.
import { useMemo, useState } from 'react';
import { fetchStatusCounts } from '../api/insights';
import { formatStatusLabel } from '../api/format';
import { ALL_RUNS, groupRuns, resolveRunSelection, rowsOfRun, runTitle, type RunGroup } from '../api/runs';
import { buildLearningCurve, fetchRewardHistory, type RewardHistory } from '../api/training';
import { ROLLOUT_STATUSES } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { replaceSearch, useLocation } from '../router';
import { useConfig, useLiveInterval } from '../state/config';
import { Badge } from './common';
import { ErrorState } from './ErrorState';
import { LearningCurveChart, LearningCurveTable } from './LearningCurve';

/** The URL query parameter holding the run the learning curve shows. */
export const RUN_PARAM = 'run';

function RunSelector({ runs, selected, onSelect }: { runs: RunGroup[]; selected: string; onSelect: (run: string) => void }) {
  const options = [...runs].reverse();
  const known = selected === ALL_RUNS || runs.some((g) => g.id === selected);
  return (
    <label className="run-selector small">
      <span className="dim">Run</span>
      <select className="input" aria-label="Learning curve run" data-testid="run-selector" value={selected} onChange={(e) => onSelect(e.target.value)}>
        {!known && <option value={selected}>{runTitle(selected)} (no finished rollouts)</option>}
        {options.map((g) => (
          <option key={g.id} value={g.id}>
            {runTitle(g.id)} · {g.versions.length} version{g.versions.length === 1 ? '' : 's'}, {g.rollouts} rollout{g.rollouts === 1 ? '' : 's'}
          </option>
        ))}
        <option value={ALL_RUNS}>{runTitle(ALL_RUNS)} ({runs.length}) on one axis</option>
      </select>
    </label>
  );
}

function RunCurve({ history }: { history: RewardHistory }) {
  const { search } = useLocation();
  const requested = new URLSearchParams(search).get(RUN_PARAM);
  const runs = useMemo(() => groupRuns(history.rows, history.createTimes), [history]);
  const { selected, known } = resolveRunSelection(requested, runs);
  const curve = useMemo(() => buildLearningCurve(rowsOfRun(history.rows, selected), history.createTimes), [history, selected]);
  const select = (run: string) => {
    const params = new URLSearchParams(window.location.search);
    params.set(RUN_PARAM, run);
    replaceSearch(params.toString());
  };
  return (
    <>
      <div className="chart-header">
        <div className="small dim">
          Learning curve: mean final reward of finished rollouts per resources version (in creation order) and mode, ±1 std
        </div>
        <span className="spacer" />
        <RunSelector runs={runs} selected={selected} onSelect={select} />
      </div>
      {known ? (
        <LearningCurveChart curve={curve} showRuns={selected === ALL_RUNS && runs.length > 1} />
      ) : (
        <div className="chart-empty dim" data-testid="learning-curve-unknown-run">
          No finished rollouts of run {selected} in this store (yet). Pick another run.
        </div>
      )}
      <LearningCurveTable curve={curve} />
    </>
  );
}

export function RolloutSummaryPanel() {
  const { client, config } = useConfig();
  const [live, setLive] = useState(true);
  const pollMs = useLiveInterval(live);
  const q = useQuery(`summary|${client.serverKey}|${config.token}`, async (signal) => {
    const [counts, history] = await Promise.all([fetchStatusCounts(client, signal), fetchRewardHistory(client, signal)]);
    return { counts, history };
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
        <ErrorState error={q.error} things="summary" onRetry={q.refetch} compact />
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
            {q.data ? <RunCurve history={q.data.history} /> : <div className="skeleton" style={{ height: 240 }} />}
          </div>
        </div>
      )}
    </section>
  );
}
