import { ChatIcon, JsonIcon, TracesIcon } from '../components/icons';
// Rollouts page with the summary panel.
import { useCallback, useEffect, useState } from 'react';
import { fetchAttempts, fetchRollouts, rolloutDuration, selectRolloutsArgs } from '../api/queries';
import { formatDateTime, formatDuration, formatRelativeTime, formatStatusLabel, jsonPreview } from '../api/format';
import { ROLLOUT_MODES, ROLLOUT_STATUSES, type Attempt, type Rollout, type RolloutMode, type RolloutStatus, type SortState } from '../api/types';
import { Badge, IdWithCopy, PageHeader, SearchInput, Skeleton } from '../components/common';
import { DataTable, MultiSelectFilter, type Column } from '../components/DataTable';
import { ExportButton } from '../components/ExportButton';
import { RolloutSummaryPanel } from '../components/RolloutSummary';
import { fetchRewardsOf, formatReward } from '../api/training';
import { useFetchAlert, usePageState, useQuery } from '../hooks/useQuery';
import { useConfig } from '../state/config';
import { useUi } from '../state/ui';

interface RolloutsState {
  searchTerm: string;
  statusFilters: RolloutStatus[];
  modeFilters: RolloutMode[];
  page: number;
  recordsPerPage: number;
  sort: SortState;
}
const DEFAULT_SORT: SortState = { column: 'startTimestamp', direction: 'desc' };
const INITIAL: RolloutsState = { searchTerm: '', statusFilters: [], modeFilters: [], page: 1, recordsPerPage: 100, sort: DEFAULT_SORT };

interface Row {
  rollout: Rollout;
  attempt: Attempt | null;
  isNested: boolean;
}

function inputText(input: unknown): string {
  if (input === null || input === undefined) return '—';
  return typeof input === 'string' ? input : jsonPreview(input);
}

type DrawerKind = 'rollout-json' | 'rollout-traces' | 'rollout-conversation';

export function rolloutColumns(
  open: (row: Row, type: DrawerKind) => void,
  filters?: { status: React.ReactNode; mode: React.ReactNode },
  rewards?: Map<string, number | null>,
): Column<Row>[] {
  const now = Date.now() / 1000;
  return [
    { accessor: 'rolloutId', title: 'Rollout', sortable: true, fixedWidth: 12.5, priority: 0,
      render: (r) => (r.isNested ? <span className="dim nested-mark">↳</span> : <IdWithCopy id={r.rollout.rolloutId} label="Copy rollout ID" />) },
    { accessor: 'attemptId', title: 'Attempt', sortable: true, fixedWidth: 12, priority: 3,
      render: (r) => (
        <span className="id-cell">
          <IdWithCopy id={r.attempt?.attemptId} label="Copy attempt ID" />
          {r.attempt && (r.isNested || r.attempt.sequenceId > 1) && <span className="badge badge-gray seq" title="Attempt sequence">↻ {r.attempt.sequenceId}</span>}
        </span>
      ) },
    { accessor: 'inputText', title: 'Input', minWidth: 14, priority: 1,
      render: (r) => (r.isNested ? null : <span className="mono dim ellipsis one-line" title={inputText(r.rollout.input)}>{inputText(r.rollout.input)}</span>) },
    { accessor: 'statusValue', title: 'Status', sortable: true, fixedWidth: 10, priority: 1, filter: filters?.status,
      render: (r) => {
        if (r.isNested) return r.attempt ? <Badge kind="attempt" value={r.attempt.status} /> : null;
        if (r.attempt && r.attempt.status !== r.rollout.status) {
          return (
            <span className="status-pair">
              <Badge kind="rollout" value={r.rollout.status} /> <span className="dim">—</span> <Badge kind="attempt" value={r.attempt.status} />
            </span>
          );
        }
        return <Badge kind="rollout" value={r.rollout.status} />;
      } },
    { accessor: 'reward', title: 'Reward', fixedWidth: 6.5, priority: 1,
      render: (r) => (r.isNested ? null : <span className="mono reward-cell" title="Final reward (latest attempt)">{rewards === undefined ? '…' : formatReward(rewards.get(r.rollout.rolloutId))}</span>) },
    { accessor: 'resourcesId', title: 'Resources', sortable: true, fixedWidth: 10, priority: 3,
      render: (r) => (r.isNested ? null : <span className="mono ellipsis">{r.rollout.resourcesId ?? '—'}</span>) },
    { accessor: 'mode', title: 'Mode', sortable: true, fixedWidth: 8, priority: 3, filter: filters?.mode,
      render: (r) => (r.isNested ? null : <span>{r.rollout.mode ?? '—'}</span>) },
    { accessor: 'startTimestamp', title: 'Start Time', sortable: true, fixedWidth: 12, priority: 2,
      render: (r) => formatDateTime(r.isNested ? r.attempt?.startTime : r.attempt?.startTime ?? r.rollout.startTime) },
    { accessor: 'durationSeconds', title: 'Duration', sortable: true, fixedWidth: 10, priority: 2,
      render: (r) => {
        if (r.isNested && r.attempt) return formatDuration(Math.max(0, (r.attempt.endTime ?? now) - (r.attempt.startTime ?? now)));
        return formatDuration(rolloutDuration(r.rollout, now));
      } },
    { accessor: 'lastHeartbeatTimestamp', title: 'Last Heartbeat', sortable: true, fixedWidth: 10, priority: 3,
      render: (r) => formatRelativeTime(r.attempt?.lastHeartbeatTime ?? null) },
    { accessor: 'workerId', title: 'Worker', sortable: true, fixedWidth: 10, priority: 3,
      render: (r) => <span className="mono">{r.attempt?.workerId ?? '—'}</span> },
    { accessor: 'actionsPlaceholder', title: 'Actions', fixedWidth: 8, priority: 0,
      render: (r) => (
        <span className="actions" onClick={(e) => e.stopPropagation()}>
          <button type="button" className="icon-button" aria-label="View raw JSON" title="View raw JSON" onClick={() => open(r, 'rollout-json')}><JsonIcon /></button>
          <button type="button" className="icon-button" aria-label="View traces" title="View traces" onClick={() => open(r, 'rollout-traces')}><TracesIcon /></button>
          {!r.isNested && (
            <button type="button" className="icon-button" aria-label="View conversation" title="View conversation" onClick={() => open(r, 'rollout-conversation')}><ChatIcon /></button>
          )}
        </span>
      ) },
  ];
}

function PreviousAttempts({ rollout, onOpen }: { rollout: Rollout; onOpen: (row: Row, type: DrawerKind) => void }) {
  const { client, config } = useConfig();
  const q = useQuery(`attempts|${client.serverKey}|${config.token}|${rollout.rolloutId}`, (signal) =>
    fetchAttempts(client, { rolloutId: rollout.rolloutId, limit: 100, offset: 0, sortBy: 'sequence_id', sortOrder: 'desc' }, signal),
  );
  if (q.error) {
    return (
      <div className="alert-inline error" role="alert">
        Unable to load attempts for this rollout. <button type="button" className="button subtle" onClick={q.refetch}>Retry</button>
      </div>
    );
  }
  if (!q.data) return <div className="dim small">Loading attempts…</div>;
  const latest = rollout.attempt?.attemptId;
  const previous = q.data.items.filter((a) => a.attemptId !== latest).sort((a, b) => b.sequenceId - a.sequenceId);
  if (previous.length === 0) {
    return (
      <div className="dim small">
        No attempts found for this rollout. <button type="button" className="button subtle" onClick={q.refetch}>Refresh</button>
      </div>
    );
  }
  return (
    <DataTable<Row>
      testId="nested-attempts"
      things="attempts"
      columns={rolloutColumns(onOpen)}
      rows={previous.map((a) => ({ rollout, attempt: a, isNested: true }))}
      rowKey={(r) => r.attempt!.attemptId}
      hideHeader
      minHeight={0}
    />
  );
}

export function RolloutsPage() {
  const { client, config } = useConfig();
  const { openDrawer } = useUi();
  const [state, update] = usePageState<RolloutsState>('rollouts', INITIAL);
  const [expanded, setExpanded] = useState<Set<string>>(new Set());
  const args = selectRolloutsArgs(state);
  const key = `rollouts|${client.serverKey}|${config.token}|${JSON.stringify(args)}`;
  const q = useQuery(key, (signal) => fetchRollouts(client, args, signal), { pollMs: config.autoRefreshMs });
  useFetchAlert('rollouts-fetch', [q.error], !q.isFetching, () => 'Unable to refresh rollouts. The list below may be out of date until the connection recovers.');

  const rows: Row[] = (q.data?.items ?? []).map((r) => ({ rollout: r, attempt: r.attempt, isNested: false }));
  const pageIds = rows.map((r) => r.rollout.rolloutId);
  const rewardsQ = useQuery(
    pageIds.length ? `rewards|${client.serverKey}|${config.token}|${pageIds.join(',')}` : null,
    (signal) => fetchRewardsOf(client, pageIds, signal),
    { pollMs: config.autoRefreshMs },
  );
  const expandable = (r: Row) => !r.isNested && (r.attempt?.sequenceId ?? 0) > 1;

  // Prune expansion state when rows disappear or stop being expandable.
  const rowIds = rows.filter(expandable).map((r) => r.rollout.rolloutId).join(',');
  useEffect(() => {
    const keep = new Set(rowIds.split(','));
    setExpanded((s) => {
      const next = new Set([...s].filter((id) => keep.has(id)));
      return next.size === s.size ? s : next;
    });
  }, [rowIds]);

  const open = useCallback(
    (row: Row, type: DrawerKind) => openDrawer({ type, rollout: row.rollout, attempt: row.attempt, isNested: row.isNested }),
    [openDrawer],
  );
  const filtersActive = !!(state.searchTerm.trim() || state.statusFilters.length || state.modeFilters.length);
  const clear = () => update({ searchTerm: '', statusFilters: [], modeFilters: [], page: 1, sort: DEFAULT_SORT });

  const columns = rolloutColumns(open, {
    status: (
      <MultiSelectFilter<RolloutStatus> label="Status" description="Filter rollouts by status" options={ROLLOUT_STATUSES}
        value={state.statusFilters} onChange={(v) => update({ statusFilters: v, page: 1 })} optionLabel={formatStatusLabel} />
    ),
    mode: (
      <MultiSelectFilter<RolloutMode> label="Mode" description="Filter rollouts by mode" options={ROLLOUT_MODES}
        value={state.modeFilters} onChange={(v) => update({ modeFilters: v, page: 1 })} optionLabel={formatStatusLabel} />
    ),
  }, rewardsQ.data);

  return (
    <div className="page" data-testid="rollouts-page">
      <PageHeader title="Rollouts">
        <SearchInput value={state.searchTerm} onChange={(v) => update({ searchTerm: v, page: 1 })} placeholder="Search by Rollout ID" />
        <span className="spacer" />
        <ExportButton statusFilters={state.statusFilters} modeFilters={state.modeFilters} />
      </PageHeader>
      <RolloutSummaryPanel />
      {q.isLoading && rows.length === 0 ? (
        <Skeleton height={360} />
      ) : (
        <DataTable<Row>
          testId="rollouts-table"
          things="rollouts"
          columns={columns}
          rows={rows}
          rowKey={(r) => r.rollout.rolloutId}
          sort={state.sort}
          onSort={(sort) => update({ sort })}
          page={state.page}
          pageSize={state.recordsPerPage}
          total={q.data?.total ?? 0}
          onPage={(page) => update({ page })}
          onPageSize={(recordsPerPage) => update({ recordsPerPage, page: 1 })}
          fetching={q.isFetching}
          error={q.error}
          filtersActive={filtersActive}
          onRetry={q.refetch}
          onClearFilters={clear}
          isExpandable={expandable}
          isExpanded={(r) => expanded.has(r.rollout.rolloutId)}
          onToggleExpand={(r) =>
            setExpanded((s) => {
              const next = new Set(s);
              if (next.has(r.rollout.rolloutId)) next.delete(r.rollout.rolloutId);
              else next.add(r.rollout.rolloutId);
              return next;
            })
          }
          renderExpansion={(r) => <PreviousAttempts rollout={r.rollout} onOpen={open} />}
        />
      )}
    </div>
  );
}
