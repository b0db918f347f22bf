import { AlertIcon, InfoIcon, JsonIcon } from './icons';
// Traces table, used by the Traces page and the rollout-traces drawer.
import { formatDateTimeMs, formatDuration } from '../api/format';
import { spanDuration } from '../api/queries';
import type { Attempt, Rollout, SortState, Span } from '../api/types';
import { Badge, IdWithCopy } from './common';
import { DataTable, type Column } from './DataTable';

export interface TracesTableProps {
  spans: Span[];
  total: number;
  page: number;
  pageSize: number;
  sort: SortState;
  onSort: (s: SortState) => void;
  onPage: (p: number) => void;
  onPageSize?: (n: number) => void;
  fetching: boolean;
  error: unknown;
  filtersActive: boolean;
  onRetry: () => void;
  onClearFilters?: () => void;
  onParentClick: (parentId: string) => void;
  onShowRollout: (span: Span) => void;
  onShowSpan: (span: Span) => void;
  emptyTitle?: string;
  emptyHint?: string;
}

export function traceColumns(
  spans: Span[],
  onParentClick: (id: string) => void,
  onShowRollout: (s: Span) => void,
  onShowSpan: (s: Span) => void,
): Column<Span>[] {
  const onPage = new Set(spans.map((s) => s.spanId));
  return [
    { accessor: 'name', title: 'Name', sortable: true, minWidth: 12.5, priority: 0, render: (s) => <strong>{s.name}</strong> },
    { accessor: 'sequenceId', title: 'Seq.', sortable: true, fixedWidth: 6, priority: 1, render: (s) => s.sequenceId },
    { accessor: 'traceId', title: 'Trace ID', sortable: true, fixedWidth: 24, priority: 3, render: (s) => <IdWithCopy id={s.traceId} label="Copy trace ID" /> },
    { accessor: 'spanId', title: 'Span ID', sortable: true, fixedWidth: 14, priority: 1, render: (s) => <IdWithCopy id={s.spanId} label="Copy span ID" /> },
    { accessor: 'parentId', title: 'Parent ID', sortable: true, fixedWidth: 12, priority: 2,
      render: (s) => {
        if (!s.parentId) return <span className="dim">—</span>;
        const short = s.parentId.slice(0, 8);
        if (onPage.has(s.parentId)) {
          return (
            <button type="button" className="link-button mono" title={s.parentId} onClick={(e) => { e.stopPropagation(); onParentClick(s.parentId!); }}>
              {short}
            </button>
          );
        }
        return <span className="mono missing-parent" title="Parent span not found in table"><AlertIcon /> {short}</span>;
      } },
    { accessor: 'statusCode', title: 'Status', sortable: true, fixedWidth: 8, priority: 2, render: (s) => <Badge kind="span" value={String(s.status.status_code)} /> },
    { accessor: 'attributeKeys', title: 'Attribute Keys', minWidth: 12.5, priority: 2,
      render: (s) => {
        const keys = Object.keys(s.attributes).join(', ');
        return <span className="ellipsis one-line dim" title={keys}>{keys || '—'}</span>;
      } },
    { accessor: 'startTime', title: 'Start Time', sortable: true, fixedWidth: 15, priority: 1, render: (s) => formatDateTimeMs(s.startTime) },
    { accessor: 'endTime', title: 'End Time', sortable: true, fixedWidth: 15, priority: 1, render: (s) => formatDateTimeMs(s.endTime) },
    { accessor: 'duration', title: 'Duration', sortable: true, fixedWidth: 10, priority: 3, render: (s) => formatDuration(spanDuration(s)) },
    { accessor: 'actionsPlaceholder', title: 'Actions', fixedWidth: 6, priority: 0,
      render: (s) => (
        <span className="actions">
          <button type="button" className="icon-button" aria-label="Show rollout" title="Show rollout" onClick={() => onShowRollout(s)}><JsonIcon /></button>
          <button type="button" className="icon-button" aria-label="Show span detail" title="Show span detail" onClick={() => onShowSpan(s)}><InfoIcon /></button>
        </span>
      ) },
  ];
}

export function TracesTable(p: TracesTableProps & { testId?: string }) {
  return (
    <DataTable<Span>
      testId={p.testId ?? 'traces-table'}
      things="traces"
      columns={traceColumns(p.spans, p.onParentClick, p.onShowRollout, p.onShowSpan)}
      rows={p.spans}
      rowKey={(s) => `${s.attemptId}:${s.spanId}`}
      sort={p.sort}
      onSort={p.onSort}
      page={p.page}
      pageSize={p.pageSize}
      total={p.total}
      onPage={p.onPage}
      onPageSize={p.onPageSize}
      fetching={p.fetching}
      error={p.error}
      filtersActive={p.filtersActive}
      onRetry={p.onRetry}
      onClearFilters={p.onClearFilters}
      emptyTitle={p.emptyTitle}
      emptyHint={p.emptyHint}
    />
  );
}

export function rolloutForSpan(span: Span, rollout: Rollout | null, attempts: Attempt[]): { rollout: Rollout | null; attempt: Attempt | null } {
  const attempt = attempts.find((a) => a.attemptId === span.attemptId) ?? (rollout?.attempt?.attemptId === span.attemptId ? rollout.attempt : null);
  return { rollout, attempt };
}
