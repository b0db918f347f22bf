// Runners (workers) page: the store's workers with their state, heartbeat times and detail.
import { InfoIcon } from '../components/icons';
import { fetchWorkers, selectWorkersArgs } from '../api/queries';
import { runnerNode } from '../api/runners';
import type { SortState, Worker } from '../api/types';
import { IdWithCopy, PageHeader, RunnerStateBadge, SearchInput, Skeleton, TwoLineTime } from '../components/common';
import { DataTable, type Column } from '../components/DataTable';
import { useNow } from '../hooks/useNow';
import { useFetchAlert, usePageState, useQuery } from '../hooks/useQuery';
import { useConfig } from '../state/config';
import { useUi } from '../state/ui';

interface WorkersState {
  searchTerm: string;
  page: number;
  recordsPerPage: number;
  sort: SortState;
}
const INITIAL: WorkersState = { searchTerm: '', page: 1, recordsPerPage: 50, sort: { column: 'lastHeartbeatTime', direction: 'desc' } };

export function RunnersPage() {
  const { client, config } = useConfig();
  const { openDrawer } = useUi();
  const [state, update] = usePageState<WorkersState>('workers', INITIAL);
  const now = useNow();
  const args = selectWorkersArgs(state);
  const q = useQuery(`workers|${client.serverKey}|${config.token}|${JSON.stringify(args)}`, (signal) => fetchWorkers(client, args, signal), {
    pollMs: config.autoRefreshMs,
  });
  useFetchAlert('workers-fetch', [q.error], !q.isFetching, (d) => `Unable to refresh workers${d ? ` (${d})` : ''}. The table may be out of date until the connection recovers.`);
  const columns: Column<Worker>[] = [
    { accessor: 'workerId', title: 'Runner ID', sortable: true, fixedWidth: 12, priority: 0, render: (w) => <IdWithCopy id={w.workerId} label="Copy worker ID" /> },
    { accessor: 'status', title: 'Status', sortable: true, fixedWidth: 6, priority: 1, render: (w) => <RunnerStateBadge worker={w} now={now} /> },
    { accessor: 'node', title: 'Node', fixedWidth: 9, priority: 2, render: (w) => <span className="mono">{runnerNode(w) ?? '—'}</span> },
    { accessor: 'currentRolloutId', title: 'Current Rollout', sortable: true, fixedWidth: 14, priority: 3, render: (w) => <span className="mono">{w.currentRolloutId ?? '—'}</span> },
    { accessor: 'currentAttemptId', title: 'Current Attempt', sortable: true, fixedWidth: 14, priority: 3, render: (w) => <span className="mono">{w.currentAttemptId ?? '—'}</span> },
    { accessor: 'lastHeartbeatTime', title: 'Heartbeat', sortable: true, fixedWidth: 10, priority: 2, render: (w) => <TwoLineTime value={w.lastHeartbeatTime} /> },
    { accessor: 'lastBusyTime', title: 'Last Busy', sortable: true, fixedWidth: 10, priority: 3, render: (w) => <TwoLineTime value={w.lastBusyTime} /> },
    { accessor: 'lastIdleTime', title: 'Last Idle', sortable: true, fixedWidth: 10, priority: 3, render: (w) => <TwoLineTime value={w.lastIdleTime} /> },
    { accessor: 'lastDequeueTime', title: 'Last Dequeue', sortable: true, fixedWidth: 10, priority: 1, render: (w) => <TwoLineTime value={w.lastDequeueTime} /> },
    { accessor: 'actions', title: 'Actions', fixedWidth: 5, priority: 0,
      render: (w) => <button type="button" className="icon-button" aria-label="Show runner detail" title="Show runner detail" onClick={() => openDrawer({ type: 'worker-detail', worker: w })}><InfoIcon /></button> },
  ];
  const rows = q.data?.items ?? [];
  return (
    <div className="page" data-testid="runners-page">
      <PageHeader title="Runners">
        <SearchInput value={state.searchTerm} onChange={(v) => update({ searchTerm: v, page: 1 })} placeholder="Search by Runner ID" />
      </PageHeader>
      {q.isLoading && rows.length === 0 ? (
        <Skeleton height={360} />
      ) : (
        <DataTable<Worker>
          testId="runners-table"
          things="workers"
          columns={columns}
          rows={rows}
          rowKey={(w) => w.workerId}
          sort={state.sort}
          onSort={(sort) => update({ sort })}
          page={state.page}
          pageSize={state.recordsPerPage}
          total={q.data?.total ?? 0}
          onPage={(page) => update({ page })}
          onPageSize={(recordsPerPage) => update({ recordsPerPage, page: 1 })}
          fetching={q.isFetching}
          error={q.error}
          filtersActive={!!state.searchTerm.trim()}
          onRetry={q.refetch}
          onClearFilters={() => update({ ...INITIAL })}
          minHeight={400}
          emptyTitle={q.error ? undefined : 'No workers found'}
          emptyHint={q.error ? undefined : state.searchTerm.trim() ? undefined : 'Try refreshing to fetch the latest worker status.'}
        />
      )}
    </div>
  );
}
