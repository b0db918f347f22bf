// Traces page with the waterfall view.
import { useCallback, useEffect, useRef, useState } from 'react';
import { fetchAttempts, fetchRollouts, fetchSpans, selectSpansArgs } from '../api/queries';
import { formatStatusLabel } from '../api/format';
import type { Attempt, Rollout, SortState, Span } from '../api/types';
import { PageHeader, Skeleton } from '../components/common';
import { RolloutCombobox } from '../components/RolloutCombobox';
import { TracesTable, rolloutForSpan } from '../components/TracesTable';
import { Waterfall } from '../components/Waterfall';
import { useFetchAlert, usePageState, useQuery } from '../hooks/useQuery';
import { replaceSearch, useLocation } from '../router';
import { useConfig, useLiveInterval } from '../state/config';
import { useUi } from '../state/ui';

type ViewMode = 'table' | 'waterfall' | 'tree';
interface TracesState {
  rolloutId: string | null;
  attemptId: string | null;
  searchTerm: string;
  page: number;
  recordsPerPage: number;
  sort: SortState;
  viewMode: ViewMode;
}
const DEFAULT_SORT: SortState = { column: 'startTime', direction: 'desc' };
const INITIAL: TracesState = { rolloutId: null, attemptId: null, searchTerm: '', page: 1, recordsPerPage: 100, sort: DEFAULT_SORT, viewMode: 'table' };

function attemptLabel(a: Attempt): string {
  return `Attempt ${a.sequenceId} (${a.attemptId}) - ${formatStatusLabel(a.status)}`;
}

export function TracesPage() {
  const { client, config } = useConfig();
  const { openDrawer } = useUi();
  const location = useLocation();
  const [state, update] = usePageState<TracesState>('traces', INITIAL);
  const cache = useRef(new Map<string, Rollout>());
  const initialHadRollout = useRef(new URLSearchParams(location.search).has('rolloutId'));
  const hydratedSearch = useRef<string | null>(null);
  const [hydrated, setHydrated] = useState(false);
  const server = `${client.serverKey}|${config.token}`;

  // 1. Hydrate from the URL whenever the query string changes (not when we wrote it ourselves).
  useEffect(() => {
    if (hydratedSearch.current === location.search) return;
    hydratedSearch.current = location.search;
    const params = new URLSearchParams(location.search);
    if (params.has('rolloutId') || params.has('attemptId')) {
      const rolloutId = params.get('rolloutId') || null;
      const attemptId = rolloutId ? params.get('attemptId') || null : null;
      update((s) => (s.rolloutId !== rolloutId ? { rolloutId, attemptId, page: 1 } : { attemptId: attemptId ?? s.attemptId }));
    }
    setHydrated(true);
  }, [location.search, update]);

  // 2. Write the selection back to the URL (replace).
  useEffect(() => {
    if (!hydrated) return;
    const params = new URLSearchParams();
    if (state.rolloutId) params.set('rolloutId', state.rolloutId);
    if (state.rolloutId && state.attemptId) params.set('attemptId', state.attemptId);
    const qs = params.toString() ? `?${params.toString()}` : '';
    hydratedSearch.current = qs;
    replaceSearch(qs);
  }, [hydrated, state.rolloutId, state.attemptId]);

  const pollMs = config.autoRefreshMs;
  const rolloutsQ = useQuery(`traces-rollouts|${server}`, (signal) =>
    fetchRollouts(client, { limit: 100, offset: 0, sortBy: 'start_time', sortOrder: 'desc' }, signal), { pollMs });
  rolloutsQ.data?.items.forEach((r) => cache.current.set(r.rolloutId, r));

  const needsLookup = !!state.rolloutId && !cache.current.has(state.rolloutId) && !!rolloutsQ.data;
  const lookupQ = useQuery(needsLookup ? `traces-lookup|${server}|${state.rolloutId}` : null, (signal) =>
    fetchRollouts(client, { limit: 20, offset: 0, sortBy: 'start_time', sortOrder: 'desc', rolloutIdContains: state.rolloutId! }, signal));
  lookupQ.data?.items.forEach((r) => cache.current.set(r.rolloutId, r));

  // 3./4. Auto-select or clear the rollout.
  useEffect(() => {
    if (!hydrated || !rolloutsQ.data) return;
    if (rolloutsQ.data.total === 0) {
      if (state.rolloutId) update({ rolloutId: null, attemptId: null, page: 1 });
      return;
    }
    if (!state.rolloutId && !initialHadRollout.current && rolloutsQ.data.items[0]) {
      update({ rolloutId: rolloutsQ.data.items[0].rolloutId, attemptId: null, page: 1 });
    }
  }, [hydrated, rolloutsQ.data, state.rolloutId, update]);
  useEffect(() => {
    if (needsLookup && lookupQ.data && !lookupQ.data.items.some((r) => r.rolloutId === state.rolloutId)) {
      update({ rolloutId: null, attemptId: null, page: 1 });
    }
  }, [needsLookup, lookupQ.data, state.rolloutId, update]);

  const rollout = state.rolloutId ? cache.current.get(state.rolloutId) ?? null : null;
  const attemptsQ = useQuery(state.rolloutId ? `traces-attempts|${server}|${state.rolloutId}` : null, (signal) =>
    fetchAttempts(client, { rolloutId: state.rolloutId!, limit: 200, offset: 0, sortBy: 'sequence_id', sortOrder: 'desc' }, signal), { pollMs });
  const attempts = (attemptsQ.data?.items ?? []).slice().sort((a, b) => b.sequenceId - a.sequenceId);
  const attemptOptions = attempts.length ? attempts : rollout?.attempt ? [rollout.attempt] : [];

  // 5./6. Attempt selection.
  useEffect(() => {
    if (!state.rolloutId) {
      if (state.attemptId) update({ attemptId: null });
      return;
    }
    if (attemptsQ.data && attemptsQ.data.items.length) {
      if (!state.attemptId || !attemptsQ.data.items.some((a) => a.attemptId === state.attemptId)) {
        const latest = attemptsQ.data.items.reduce((m, a) => (a.sequenceId > m.sequenceId ? a : m));
        update({ attemptId: latest.attemptId, page: 1 });
      }
    } else if (attemptsQ.data && !state.attemptId && rollout?.attempt) {
      update({ attemptId: rollout.attempt.attemptId });
    }
  }, [state.rolloutId, state.attemptId, attemptsQ.data, rollout, update]);

  const spanArgs = selectSpansArgs(state);
  const tableView = state.viewMode === 'table';
  const spansQ = useQuery(tableView && spanArgs ? `traces-spans|${server}|${JSON.stringify(spanArgs)}` : null, (signal) =>
    fetchSpans(client, spanArgs!, signal), { pollMs });
  const [live, setLive] = useState(true);
  const livePoll = useLiveInterval(live);
  const wfQ = useQuery(!tableView && state.rolloutId ? `traces-waterfall|${server}|${state.rolloutId}|${state.attemptId}` : null, (signal) =>
    fetchSpans(client, { rolloutId: state.rolloutId!, attemptId: state.attemptId, limit: -1, offset: 0, sortBy: 'sequence_id', sortOrder: 'asc' }, signal), { pollMs: livePoll });

  const errors = [rolloutsQ.error, attemptsQ.error, tableView ? spansQ.error : wfQ.error];
  useFetchAlert('traces-fetch', errors, !rolloutsQ.isFetching && !attemptsQ.isFetching && !spansQ.isFetching && !wfQ.isFetching,
    (d) => `Unable to refresh traces${d ? ` (${d})` : ''}. The table may be out of date until the connection recovers.`);

  const selectionMessage = !state.rolloutId
    ? state.attemptId ? 'Select a rollout to view traces.' : 'Select a rollout and attempt to view traces.'
    : !state.attemptId && attemptOptions.length ? 'Select an attempt to view traces.' : undefined;

  const rememberRollouts = useCallback((items: Rollout[]) => items.forEach((r) => cache.current.set(r.rolloutId, r)), []);
  const rolloutOptions = rolloutsQ.data?.items.slice() ?? [];
  if (rollout && !rolloutOptions.some((r) => r.rolloutId === rollout.rolloutId)) rolloutOptions.unshift(rollout);
  const showSpan = (span: Span) => {
    const { attempt } = rolloutForSpan(span, rollout, attempts);
    openDrawer({ type: 'trace-detail', span, rollout, attempt });
  };
  const spans = spansQ.data?.items ?? [];

  return (
    <div className="page" data-testid="traces-page">
      <PageHeader title="Traces">
        <RolloutCombobox
          client={client}
          serverKey={server}
          value={state.rolloutId}
          options={rolloutOptions}
          loading={rolloutsQ.isFetching}
          onSelect={(id) => update((s) => (s.rolloutId === id ? {} : { rolloutId: id, attemptId: null, page: 1 }))}
          onResults={rememberRollouts}
        />
        <select className="input" style={{ width: 280 }} aria-label="Select attempt" value={state.attemptId ?? ''}
          disabled={!state.rolloutId || attemptOptions.length === 0}
          onChange={(e) => update({ attemptId: e.target.value || null, page: 1 })}>
          <option value="">{!state.rolloutId ? 'Select Attempt' : attemptOptions.length === 0 ? 'No Attempt' : 'Latest Attempt'}</option>
          {attemptOptions.map((a) => (
            <option key={a.attemptId} value={a.attemptId}>{attemptLabel(a)}</option>
          ))}
        </select>
        <input type="search" className="input" style={{ width: 280 }} placeholder="Search spans" aria-label="Search spans"
          value={state.searchTerm} onChange={(e) => update({ searchTerm: e.target.value, page: 1 })} />
        <span className="spacer" />
        <div className="segmented" role="group" aria-label="Change traces view">
          {(['table', 'waterfall'] as const).map((m) => (
            <button key={m} type="button" className={state.viewMode === m ? 'active' : ''} aria-pressed={state.viewMode === m}
              onClick={() => update({ viewMode: m })}>
              {m === 'table' ? 'Table View' : 'Waterfall View'}
            </button>
          ))}
        </div>
      </PageHeader>
      {rolloutsQ.isLoading ? (
        <Skeleton height={360} />
      ) : tableView ? (
        <TracesTable
          spans={state.rolloutId ? spans : []}
          total={state.rolloutId ? spansQ.data?.total ?? 0 : 0}
          page={state.page}
          pageSize={state.recordsPerPage}
          sort={state.sort}
          onSort={(sort) => update({ sort })}
          onPage={(page) => update({ page })}
          onPageSize={(recordsPerPage) => update({ recordsPerPage, page: 1 })}
          fetching={spansQ.isFetching}
          error={spansQ.error}
          filtersActive={!!state.searchTerm.trim()}
          onRetry={spansQ.refetch}
          onClearFilters={() => update({ searchTerm: '', page: 1, sort: DEFAULT_SORT })}
          onParentClick={(id) => update({ searchTerm: id, page: 1 })}
          onShowRollout={(span) => {
            if (!rollout) return;
            const { attempt } = rolloutForSpan(span, rollout, attempts);
            openDrawer({ type: 'rollout-json', rollout, attempt, isNested: false });
          }}
          onShowSpan={showSpan}
          emptyTitle={selectionMessage}
          emptyHint={selectionMessage ? 'Choose a rollout and attempt from the controls above to load trace results.' : undefined}
        />
      ) : state.rolloutId ? (
        <section className="card">
          <div className="card-header">
            <h2>Waterfall</h2>
            <span className="dim small">{wfQ.data ? `${wfQ.data.items.length} spans` : ''}</span>
            <span className="spacer" />
            {wfQ.isFetching && <span className="spinner small" />}
            <label className="check small">
              <input type="checkbox" checked={live} onChange={(e) => setLive(e.target.checked)} aria-label="Live updates" /> Live
            </label>
          </div>
          {wfQ.data ? <Waterfall spans={wfQ.data.items} /> : wfQ.error ? <div className="error-text">Unable to load spans.</div> : <Skeleton height={240} />}
        </section>
      ) : (
        <div className="empty-state"><div className="empty-title">{selectionMessage}</div></div>
      )}
    </div>
  );
}
