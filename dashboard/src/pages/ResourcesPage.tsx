// Resources page.
import { useState } from 'react';
import { fetchResources, selectResourcesArgs } from '../api/queries';
import { formatDateTime, jsonPreview } from '../api/format';
import type { ResourcesUpdate, SortState } from '../api/types';
import { IdWithCopy, PageHeader, SearchInput, Skeleton } from '../components/common';
import { DataTable, type Column } from '../components/DataTable';
import { useFetchAlert, usePageState, useQuery } from '../hooks/useQuery';
import { useConfig } from '../state/config';

interface ResourcesState {
  searchTerm: string;
  page: number;
  recordsPerPage: number;
  sort: SortState;
}
const INITIAL: ResourcesState = { searchTerm: '', page: 1, recordsPerPage: 50, sort: { column: 'updateTime', direction: 'desc' } };

function TreeNode({ name, value }: { name: string; value: unknown }) {
  const [open, setOpen] = useState(false);
  if (value !== null && typeof value === 'object') {
    const isArray = Array.isArray(value);
    const entries: [string, unknown][] = isArray ? (value as unknown[]).map((v, i) => [`[${i}]`, v]) : Object.entries(value as object);
    return (
      <li className="tree-node">
        <button type="button" className="tree-toggle" aria-expanded={open} onClick={() => setOpen((o) => !o)}>
          <span className={`chevron${open ? ' open' : ''}`}>▸</span> {name} {isArray ? `(Array[${entries.length}])` : '(Object)'}
        </button>
        {open && (
          <ul className="tree">
            {entries.map(([k, v]) => <TreeNode key={k} name={k} value={v} />)}
          </ul>
        )}
      </li>
    );
  }
  return (
    <li className="tree-leaf">
      {name}: <span className="mono">{JSON.stringify(value)}</span>
    </li>
  );
}

export function ResourcesTree({ resources }: { resources: Record<string, unknown> }) {
  const names = Object.keys(resources);
  if (names.length === 0) return <div className="dim">∅ No resources found</div>;
  return (
    <ul className="tree root" data-testid="resources-tree">
      {names.map((n) => <TreeNode key={n} name={n} value={resources[n]} />)}
    </ul>
  );
}

const columns: Column<ResourcesUpdate>[] = [
  { accessor: 'resourcesId', title: 'Resources ID', sortable: true, fixedWidth: 12, priority: 0, render: (r) => <IdWithCopy id={r.resourcesId} label="Copy resources ID" /> },
  { accessor: 'version', title: 'Version', sortable: true, fixedWidth: 8, priority: 1, render: (r) => r.version },
  { accessor: 'createTime', title: 'Created', sortable: true, fixedWidth: 14, priority: 2, render: (r) => formatDateTime(r.createTime) },
  { accessor: 'updateTime', title: 'Updated', sortable: true, fixedWidth: 14, priority: 2, render: (r) => formatDateTime(r.updateTime) },
  { accessor: 'resourceCount', title: 'Count', sortable: false, fixedWidth: 8, priority: 3, render: (r) => Object.keys(r.resources).length },
  { accessor: 'resourcesPreview', title: 'Preview', minWidth: 16, priority: 4, render: (r) => <span className="mono dim ellipsis one-line" title={jsonPreview(r.resources)}>{jsonPreview(r.resources)}</span> },
];

export function ResourcesPage() {
  const { client, config } = useConfig();
  const [state, update] = usePageState<ResourcesState>('resources', INITIAL);
  const [expanded, setExpanded] = useState<Set<string>>(new Set());
  const args = selectResourcesArgs(state);
  const q = useQuery(`resources|${client.serverKey}|${config.token}|${JSON.stringify(args)}`, (signal) => fetchResources(client, args, signal), {
    pollMs: config.autoRefreshMs,
  });
  useFetchAlert('resources-fetch', [q.error], !q.isFetching, (d) => `Unable to refresh resources${d ? ` (${d})` : ''}. The table may be out of date until the connection recovers.`);
  const rows = q.data?.items ?? [];
  return (
    <div className="page" data-testid="resources-page">
      <PageHeader title="Resources">
        <SearchInput value={state.searchTerm} onChange={(v) => update({ searchTerm: v, page: 1 })} placeholder="Search by Resources ID" />
      </PageHeader>
      {q.isLoading && rows.length === 0 ? (
        <Skeleton height={360} />
      ) : (
        <DataTable<ResourcesUpdate>
          testId="resources-table"
          things="resources"
          columns={columns}
          rows={rows}
          rowKey={(r) => r.resourcesId}
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
          isExpandable={(r) => Object.keys(r.resources).length > 0}
          isExpanded={(r) => expanded.has(r.resourcesId)}
          onToggleExpand={(r) => setExpanded((s) => { const n = new Set(s); if (n.has(r.resourcesId)) n.delete(r.resourcesId); else n.add(r.resourcesId); return n; })}
          renderExpansion={(r) => <ResourcesTree resources={r.resources} />}
        />
      )}
    </div>
  );
}
