import { FilterIcon } from './icons';
// Server-side paginated/sorted table with responsive columns, an empty state and an error page naming the failed URL.
import { Fragment, useEffect, useLayoutEffect, useRef, useState, type ReactNode } from 'react';
import type { SortState } from '../api/types';
import { ErrorState } from './ErrorState';

export interface Column<R> {
  accessor: string;
  title: string;
  sortable?: boolean;
  /** Fixed width in em (also the column width) or minimum width in em. */
  fixedWidth?: number;
  minWidth?: number;
  priority?: number;
  render: (row: R) => ReactNode;
  filter?: ReactNode;
}

export const PAGE_SIZES = [50, 100, 200, 500];
const EM_PX = 14;

export function visibleColumns<R>(columns: Column<R>[], availablePx: number | null): Column<R>[] {
  if (availablePx === null || availablePx <= 0) return columns;
  const widthOf = (c: Column<R>) => (c.fixedWidth ?? c.minWidth ?? 10) * EM_PX;
  const chosen = new Set<Column<R>>();
  let used = 0;
  for (const c of columns) {
    if ((c.priority ?? 3) === 0) {
      chosen.add(c);
      used += widthOf(c);
    }
  }
  const rest = columns
    .map((c, i) => ({ c, i }))
    .filter(({ c }) => (c.priority ?? 3) !== 0)
    .sort((a, b) => (a.c.priority ?? 3) - (b.c.priority ?? 3) || a.i - b.i);
  for (const { c } of rest) {
    if (used + widthOf(c) > availablePx) continue;
    chosen.add(c);
    used += widthOf(c);
  }
  return columns.filter((c) => chosen.has(c));
}

function useWidth(ref: React.RefObject<HTMLElement | null>): number | null {
  const [width, setWidth] = useState<number | null>(null);
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el) return;
    setWidth(el.clientWidth);
    if (typeof ResizeObserver === 'undefined') return;
    const ro = new ResizeObserver(() => setWidth(el.clientWidth));
    ro.observe(el);
    return () => ro.disconnect();
  }, [ref]);
  return width;
}

export interface DataTableProps<R> {
  testId: string;
  things: string;
  columns: Column<R>[];
  rows: R[];
  rowKey: (row: R) => string;
  sort?: SortState;
  onSort?: (sort: SortState) => void;
  page?: number;
  pageSize?: number;
  total?: number;
  onPage?: (page: number) => void;
  onPageSize?: (size: number) => void;
  fetching?: boolean;
  error?: unknown;
  filtersActive?: boolean;
  onRetry?: () => void;
  onClearFilters?: () => void;
  emptyTitle?: string;
  emptyHint?: string;
  minHeight?: number;
  isExpandable?: (row: R) => boolean;
  isExpanded?: (row: R) => boolean;
  onToggleExpand?: (row: R) => void;
  renderExpansion?: (row: R) => ReactNode;
  hideHeader?: boolean;
  rowProps?: (row: R) => Record<string, string>;
}

export function DataTable<R>(props: DataTableProps<R>) {
  const {
    testId, things, columns, rows, rowKey, sort, onSort, page = 1, pageSize, total, onPage, onPageSize, fetching, error,
    filtersActive, onRetry, onClearFilters, minHeight = 500, isExpandable, isExpanded, onToggleExpand, renderExpansion,
    hideHeader, rowProps,
  } = props;
  const containerRef = useRef<HTMLDivElement>(null);
  const width = useWidth(containerRef);
  const cols = visibleColumns(columns, width);

  const lastPage = pageSize && total !== undefined ? Math.max(1, Math.ceil(total / pageSize)) : 1;
  useEffect(() => {
    if (!fetching && onPage && total !== undefined && page > lastPage) onPage(lastPage);
  }, [fetching, onPage, total, page, lastPage]);

  const empty = rows.length === 0;

  return (
    <div className="table-wrap" ref={containerRef} data-testid={testId} aria-busy={fetching ? 'true' : 'false'}>
      <div className="table-scroll" style={{ minHeight: empty ? minHeight : undefined }}>
        <table className="data-table">
          {!hideHeader && (
            <thead>
              <tr>
                {cols.map((c) => {
                  const active = sort?.column === c.accessor;
                  return (
                    <th
                      key={c.accessor}
                      style={{ width: c.fixedWidth ? `${c.fixedWidth}em` : undefined, minWidth: c.minWidth ? `${c.minWidth}em` : undefined }}
                      aria-sort={active ? (sort!.direction === 'asc' ? 'ascending' : 'descending') : undefined}
                      data-column={c.accessor}
                    >
                      <div className="th-inner">
                        {c.sortable && onSort ? (
                          <button
                            type="button"
                            className="sort-button"
                            onClick={() =>
                              onSort({ column: c.accessor, direction: active && sort!.direction === 'asc' ? 'desc' : 'asc' })
                            }
                          >
                            {c.title}
                            <span className="sort-indicator">{active ? (sort!.direction === 'asc' ? '▲' : '▼') : '↕'}</span>
                          </button>
                        ) : (
                          <span>{c.title}</span>
                        )}
                        {c.filter}
                      </div>
                    </th>
                  );
                })}
              </tr>
            </thead>
          )}
          <tbody>
            {rows.map((row) => {
              const key = rowKey(row);
              const expandable = isExpandable?.(row) ?? false;
              const expanded = expandable && (isExpanded?.(row) ?? false);
              return (
                <Fragment key={key}>
                  <tr
                    data-testid={`${testId}-row`}
                    data-row-id={key}
                    className={expandable ? 'expandable' : undefined}
                    aria-expanded={expandable ? expanded : undefined}
                    onClick={expandable ? () => onToggleExpand?.(row) : undefined}
                    {...(rowProps?.(row) ?? {})}
                  >
                    {cols.map((c) => (
                      <td key={c.accessor} data-column={c.accessor}>
                        {c.render(row)}
                      </td>
                    ))}
                  </tr>
                  {expanded && renderExpansion && (
                    <tr className="expansion-row">
                      <td colSpan={cols.length}>{renderExpansion(row)}</td>
                    </tr>
                  )}
                </Fragment>
              );
            })}
          </tbody>
        </table>
        {empty && !fetching && (
          <div className="empty-state" data-testid={`${testId}-empty`}>
            {error ? (
              <ErrorState error={error} things={things} onRetry={onRetry} filtersActive={filtersActive} onClearFilters={onClearFilters} />
            ) : (
              <>
                <div className="empty-title">{props.emptyTitle ?? `No ${things} found`}</div>
                <div className="dim">
                  {props.emptyHint ??
                    (filtersActive ? 'Try adjusting the search (or filters) to see more results.' : `Try refreshing to fetch the latest ${things}.`)}
                </div>
                <div className="button-row">
                  {onRetry && <button type="button" className="button" onClick={onRetry}>Refresh</button>}
                  {filtersActive && onClearFilters && <button type="button" className="button subtle" onClick={onClearFilters}>Clear filters</button>}
                </div>
              </>
            )}
          </div>
        )}
        {fetching && <div className="loader-overlay" data-testid={`${testId}-loading`}><span className="spinner" /></div>}
      </div>
      {pageSize !== undefined && onPage && (
        <div className="pagination" data-testid={`${testId}-pagination`}>
          <span className="dim">
            {total ? `${(page - 1) * pageSize + 1}–${Math.min(total, page * pageSize)} of ${total}` : '0 records'}
          </span>
          <span className="spacer" />
          {onPageSize && (
            <label className="dim">
              Records per page{' '}
              <select aria-label="Records per page" value={pageSize} onChange={(e) => onPageSize(Number(e.target.value))}>
                {PAGE_SIZES.map((n) => (
                  <option key={n} value={n}>{n}</option>
                ))}
              </select>
            </label>
          )}
          <button type="button" className="button subtle" aria-label="Previous page" disabled={page <= 1} onClick={() => onPage(page - 1)}>‹</button>
          <span data-testid={`${testId}-page`}>Page {page} / {lastPage}</span>
          <button type="button" className="button subtle" aria-label="Next page" disabled={page >= lastPage} onClick={() => onPage(page + 1)}>›</button>
        </div>
      )}
    </div>
  );
}

/** Multi-select header filter (checkbox popover) with a "Clear" button. */
export function MultiSelectFilter<T extends string>({
  label, description, options, value, onChange, optionLabel,
}: {
  label: string;
  description: string;
  options: readonly T[];
  value: T[];
  onChange: (v: T[]) => void;
  optionLabel: (v: T) => string;
}) {
  const [open, setOpen] = useState(false);
  return (
    <span className="filter" onClick={(e) => e.stopPropagation()}>
      <button
        type="button"
        className={`icon-button filter-button${value.length ? ' active' : ''}`}
        aria-label={`Filter by ${label.toLowerCase()}`}
        aria-expanded={open}
        onClick={() => setOpen((o) => !o)}
      >
        <FilterIcon />{value.length ? <span className="filter-count">{value.length}</span> : null}
      </button>
      {open && (
        <div className="popover" role="dialog" aria-label={label}>
          <div className="popover-title">{label}</div>
          <div className="dim small">{description}</div>
          <div className="popover-options">
            {options.map((o) => (
              <label key={o} className="check">
                <input
                  type="checkbox"
                  checked={value.includes(o)}
                  onChange={(e) => onChange(e.target.checked ? [...value, o] : value.filter((v) => v !== o))}
                />
                {optionLabel(o)}
              </label>
            ))}
          </div>
          <div className="button-row">
            <button type="button" className="button subtle" onClick={() => onChange([])}>Clear</button>
            <button type="button" className="button" onClick={() => setOpen(false)}>Done</button>
          </div>
        </div>
      )}
    </span>
  );
}
