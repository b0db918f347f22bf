// Global right-side drawer. On wide screens it is docked beside the page (the page narrows, nothing is covered: the
// learning curve stays in view); on narrow ones it slides over the page with a dimmed overlay that closes it.
import { CloseIcon } from './icons';
import { useEffect, useRef, useState } from 'react';
import { fetchAttempts, fetchSpans } from '../api/queries';
import type { Attempt, Rollout, SortState } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { Link, useLocation } from '../router';
import { useConfig } from '../state/config';
import { useUi, type DrawerContent } from '../state/ui';
import { Badge, CopyButton, JsonView, RunnerStateBadge } from './common';
import { ConversationView } from './Conversation';
import { TracesTable, rolloutForSpan } from './TracesTable';

function RolloutTitle({ rollout, attempt }: { rollout: Rollout; attempt: Attempt | null }) {
  const mismatch = attempt && attempt.status !== rollout.status;
  return (
    <div className="drawer-title">
      <div className="row">
        <strong className="mono">{rollout.rolloutId}</strong>
        <CopyButton value={rollout.rolloutId} label={`Copy rollout ID ${rollout.rolloutId}`} />
        {(mismatch || !attempt) && <Badge kind="rollout" value={rollout.status} />}
      </div>
      {attempt && (
        <div className="row small">
          <span>Attempt {attempt.attemptId}</span>
          <Badge kind={mismatch ? 'attempt' : 'rollout'} value={mismatch ? attempt.status : rollout.status} />
        </div>
      )}
    </div>
  );
}

function RolloutTraces({ rollout, attempt }: { rollout: Rollout; attempt: Attempt | null }) {
  const { client, config } = useConfig();
  const { openDrawer } = useUi();
  const [page, setPage] = useState(1);
  const [sort, setSort] = useState<SortState>({ column: 'startTime', direction: 'desc' });
  useEffect(() => setPage(1), [rollout.rolloutId, attempt?.attemptId]);
  const sortBy = { name: 'name', sequenceId: 'sequence_id', traceId: 'trace_id', spanId: 'span_id', parentId: 'parent_id', statusCode: 'status_code', startTime: 'start_time', endTime: 'end_time', duration: 'duration' }[sort.column] ?? 'start_time';
  const args = { rolloutId: rollout.rolloutId, attemptId: attempt?.attemptId ?? null, limit: 100, offset: (page - 1) * 100, sortBy, sortOrder: sort.direction };
  const q = useQuery(`drawer-spans|${client.serverKey}|${config.token}|${JSON.stringify(args)}`, (signal) => fetchSpans(client, args, signal));
  const attemptsQ = useQuery(`drawer-attempts|${client.serverKey}|${rollout.rolloutId}`, (signal) => fetchAttempts(client, { rolloutId: rollout.rolloutId }, signal));
  const href = `/traces?rolloutId=${encodeURIComponent(rollout.rolloutId)}${attempt ? `&attemptId=${encodeURIComponent(attempt.attemptId)}` : ''}`;
  return (
    <div>
      <div className="row drawer-sub">
        <span>
          Showing spans for <strong>{rollout.rolloutId} · {attempt ? `Attempt ${attempt.sequenceId} (${attempt.attemptId})` : 'Latest attempt'}</strong>
        </span>
        <span className="spacer" />
        <Link to={href} aria-label={`Open traces page for rollout ${rollout.rolloutId}${attempt ? ` attempt ${attempt.sequenceId}` : ''}`}>View full traces</Link>
      </div>
      <TracesTable
        testId="drawer-traces-table"
        spans={q.data?.items ?? []}
        total={q.data?.total ?? 0}
        page={page}
        pageSize={100}
        sort={sort}
        onSort={setSort}
        onPage={setPage}
        fetching={q.isFetching}
        error={q.error}
        filtersActive={false}
        onRetry={q.refetch}
        onParentClick={() => undefined}
        onShowRollout={(span) => {
          const { attempt: a } = rolloutForSpan(span, rollout, attemptsQ.data?.items ?? []);
          openDrawer({ type: 'rollout-json', rollout, attempt: a ?? attempt, isNested: false });
        }}
        onShowSpan={(span) => {
          const { attempt: a } = rolloutForSpan(span, rollout, attemptsQ.data?.items ?? []);
          openDrawer({ type: 'trace-detail', span, rollout, attempt: a ?? attempt });
        }}
      />
    </div>
  );
}

function DrawerBody({ content }: { content: DrawerContent }) {
  switch (content.type) {
    case 'rollout-json':
      return <JsonView value={content.isNested && content.attempt ? content.attempt : content.rollout} testId="drawer-json" />;
    case 'rollout-traces':
      return <RolloutTraces rollout={content.rollout} attempt={content.attempt} />;
    case 'rollout-conversation':
      return <ConversationView rollout={content.rollout} />;
    case 'trace-detail':
      return <JsonView value={content.span} testId="drawer-json" />;
    case 'worker-detail':
      return <JsonView value={content.worker} testId="drawer-json" />;
  }
}

function DrawerTitle({ content }: { content: DrawerContent }) {
  if (content.type === 'rollout-json' || content.type === 'rollout-traces' || content.type === 'rollout-conversation') return <RolloutTitle rollout={content.rollout} attempt={content.attempt} />;
  if (content.type === 'trace-detail') {
    const { span } = content;
    return (
      <div className="drawer-title">
        <div className="row"><strong>{span.name || span.spanId}</strong><Badge kind="span" value={String(span.status.status_code)} /></div>
        <div className="row small mono">{span.spanId}<CopyButton value={span.spanId} label={`Copy span ID ${span.spanId}`} /></div>
        <div className="row small">Rollout {content.rollout?.rolloutId ?? span.rolloutId} · Attempt {content.attempt?.attemptId ?? '—'}</div>
      </div>
    );
  }
  const { worker } = content;
  return (
    <div className="drawer-title">
      <div className="row"><strong className="mono">{worker.workerId}</strong><CopyButton value={worker.workerId} label={`Copy worker ID ${worker.workerId}`} /><RunnerStateBadge worker={worker} now={Date.now() / 1000} /></div>
      <div className="row small">Rollout {worker.currentRolloutId ?? '—'} · Attempt {worker.currentAttemptId ?? '—'}</div>
    </div>
  );
}

export function Drawer() {
  const { drawer, closeDrawer } = useUi();
  const location = useLocation();
  const firstKey = useRef(location.key);
  useEffect(() => {
    if (firstKey.current !== location.key) closeDrawer();
    firstKey.current = location.key;
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [location.key]);
  useEffect(() => {
    if (!drawer) return;
    const onKey = (e: KeyboardEvent) => { if (e.key === 'Escape') closeDrawer(); };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [drawer, closeDrawer]);
  if (!drawer) return null;
  return (
    <>
      <div className="drawer-overlay" data-testid="drawer-overlay" onClick={closeDrawer} />
      <aside className="drawer" role="dialog" aria-label="Details" data-testid="drawer" data-drawer-type={drawer.type}>
        <header className="drawer-header">
          <DrawerTitle content={drawer} />
          <button type="button" className="icon-button" aria-label="Close drawer" onClick={closeDrawer}><CloseIcon /></button>
        </header>
        <div className="drawer-content"><DrawerBody content={drawer} /></div>
      </aside>
    </>
  );
}
