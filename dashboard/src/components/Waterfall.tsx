// Trace waterfall: spans on a timeline, nested under their parents; selecting a span shows its attributes.
import { useEffect, useMemo, useState } from 'react';
import { formatDateTimeMs, formatSpanDuration } from '../api/format';
import { attributeEntries, buildWaterfall } from '../api/insights';
import type { Span } from '../api/types';
import { Badge, CopyButton } from './common';

export function SpanAttributes({ span }: { span: Span }) {
  const entries = attributeEntries(span.attributes);
  return (
    <div className="span-attributes" data-testid="span-attributes">
      <div className="span-attr-header">
        <strong>{span.name || span.spanId}</strong> <Badge kind="span" value={String(span.status.status_code)} />
      </div>
      <dl className="kv small">
        <dt>Span ID</dt><dd className="mono">{span.spanId} <CopyButton value={span.spanId} label={`Copy span ID ${span.spanId}`} /></dd>
        <dt>Parent</dt><dd className="mono">{span.parentId ?? '—'}</dd>
        <dt>Trace ID</dt><dd className="mono">{span.traceId}</dd>
        <dt>Start</dt><dd>{formatDateTimeMs(span.startTime)}</dd>
        <dt>End</dt><dd>{formatDateTimeMs(span.endTime)}</dd>
        <dt>Duration</dt><dd>{span.startTime !== null && span.endTime !== null ? formatSpanDuration(span.endTime - span.startTime) : 'open'}</dd>
        {span.status.description && (<><dt>Status</dt><dd>{span.status.description}</dd></>)}
      </dl>
      <h3>Attributes ({entries.length})</h3>
      {entries.length === 0 ? (
        <div className="dim small">No attributes.</div>
      ) : (
        <table className="attr-table">
          <tbody>
            {entries.map(([k, v]) => (
              <tr key={k} data-testid="span-attribute">
                <th className="mono">{k}</th>
                <td className="mono">{v}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {span.events.length > 0 && <div className="dim small">{span.events.length} event(s)</div>}
    </div>
  );
}

export function Waterfall({ spans, now }: { spans: Span[]; now?: number }) {
  const layout = useMemo(() => buildWaterfall(spans, now), [spans, now]);
  const [selected, setSelected] = useState<string | null>(null);
  const [collapsed, setCollapsed] = useState<Set<string>>(new Set());
  useEffect(() => {
    if (!selected || !spans.some((s) => s.spanId === selected)) setSelected(layout.rows[0]?.span.spanId ?? null);
  }, [spans, selected, layout.rows]);

  if (layout.rows.length === 0) return <div className="empty-state"><div className="empty-title">No spans in this attempt yet.</div></div>;

  // Hide descendants of collapsed rows.
  const visible: typeof layout.rows = [];
  let hideBelow: number | null = null;
  for (const row of layout.rows) {
    if (hideBelow !== null && row.depth > hideBelow) continue;
    hideBelow = null;
    visible.push(row);
    if (collapsed.has(row.span.spanId)) hideBelow = row.depth;
  }
  const selectedSpan = spans.find((s) => s.spanId === selected) ?? null;
  const ticks = [0, 0.25, 0.5, 0.75, 1];
  return (
    <div className="waterfall-layout" data-testid="waterfall">
      <div className="waterfall">
        <div className="wf-row wf-axis">
          <div className="wf-name dim small">Span</div>
          <div className="wf-track">
            {ticks.map((t) => (
              <span key={t} className="wf-tick small dim" style={{ left: `${t * 100}%` }}>{formatSpanDuration(t * layout.total)}</span>
            ))}
          </div>
        </div>
        {visible.map((row) => {
          const left = (row.offset / layout.total) * 100;
          const width = Math.max((row.duration / layout.total) * 100, 0.4);
          const s = row.span;
          return (
            <div
              key={s.spanId}
              className={`wf-row${selected === s.spanId ? ' selected' : ''}`}
              data-testid="waterfall-row"
              data-span-id={s.spanId}
              data-depth={row.depth}
              role="button"
              tabIndex={0}
              aria-pressed={selected === s.spanId}
              onClick={() => setSelected(s.spanId)}
              onKeyDown={(e) => { if (e.key === 'Enter') setSelected(s.spanId); }}
            >
              <div className="wf-name" style={{ paddingLeft: `${row.depth * 16 + 4}px` }}>
                {row.hasChildren ? (
                  <button type="button" className="wf-toggle" aria-label={`${collapsed.has(s.spanId) ? 'Expand' : 'Collapse'} ${s.name}`}
                    onClick={(e) => { e.stopPropagation(); setCollapsed((c) => { const n = new Set(c); if (n.has(s.spanId)) n.delete(s.spanId); else n.add(s.spanId); return n; }); }}>
                    {collapsed.has(s.spanId) ? '▸' : '▾'}
                  </button>
                ) : <span className="wf-toggle-space" />}
                <span className="ellipsis" title={s.name}>{s.name}</span>
              </div>
              <div className="wf-track">
                <div
                  className={`wf-bar status-${String(s.status.status_code).toLowerCase()}${row.open ? ' open' : ''}`}
                  style={{ left: `${left}%`, width: `${Math.min(width, 100 - left)}%` }}
                  title={`${s.name}: ${row.open ? 'open' : formatSpanDuration(row.duration)}`}
                />
                <span
                  className={`wf-label small${left + width > 85 && width > 12 ? ' inside' : ''}`}
                  style={left + width > 85 && width > 12 ? { left: `calc(${Math.min(left + width, 100)}% - 0.5rem)` } : { left: `${Math.min(left + width, 92)}%` }}
                >
                  {row.open ? 'open' : formatSpanDuration(row.duration)}
                </span>
              </div>
            </div>
          );
        })}
      </div>
      <aside className="wf-detail">{selectedSpan ? <SpanAttributes span={selectedSpan} /> : <div className="dim">Select a span.</div>}</aside>
    </div>
  );
}
