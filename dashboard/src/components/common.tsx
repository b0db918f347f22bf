import { CheckIcon, CopyIcon } from './icons';
import { useState, type ReactNode } from 'react';
import { formatDateTime, formatRelativeTime, formatStatusLabel } from '../api/format';
import { runnerState, runnerStateHint } from '../api/runners';
import type { Worker } from '../api/types';

const ROLLOUT_COLORS: Record<string, string> = {
  queuing: 'gray',
  preparing: 'violet',
  running: 'blue',
  succeeded: 'teal',
  failed: 'red',
  cancelled: 'gray',
  requeuing: 'gray',
};
const ATTEMPT_COLORS: Record<string, string> = {
  preparing: 'violet',
  running: 'blue',
  succeeded: 'teal',
  failed: 'red',
  timeout: 'orange',
  unresponsive: 'orange',
};
const SPAN_COLORS: Record<string, string> = { UNSET: 'gray', OK: 'teal', ERROR: 'red' };
const WORKER_COLORS: Record<string, string> = { busy: 'orange', idle: 'teal', unknown: 'gray', stopped: 'slate', offline: 'red' };

export type BadgeKind = 'rollout' | 'attempt' | 'span' | 'worker' | 'plain';

export function Badge({ kind, value, color, title, children }: { kind: BadgeKind; value: string; color?: string; title?: string; children?: ReactNode }) {
  const palette =
    kind === 'rollout' ? ROLLOUT_COLORS : kind === 'attempt' ? ATTEMPT_COLORS : kind === 'span' ? SPAN_COLORS : kind === 'worker' ? WORKER_COLORS : {};
  const c = color ?? palette[value] ?? 'gray';
  return (
    <span className={`badge badge-${c}`} data-status={value} title={title}>
      {children ?? (kind === 'span' ? value : formatStatusLabel(value))}
    </span>
  );
}

export function CopyButton({ value, label }: { value: string; label: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <button
      type="button"
      className="icon-button copy"
      aria-label={label}
      title={copied ? 'Copied' : 'Copy'}
      onClick={(e) => {
        e.stopPropagation();
        const done = () => {
          setCopied(true);
          window.setTimeout(() => setCopied(false), 1200);
        };
        navigator.clipboard?.writeText(value).then(done, done) ?? done();
      }}
    >
      {copied ? <CheckIcon /> : <CopyIcon />}
    </button>
  );
}

export function IdWithCopy({ id, label }: { id: string | null | undefined; label: string }) {
  if (!id) return <span className="dim">—</span>;
  return (
    <span className="id-cell">
      <span className="mono ellipsis" title={id}>
        {id}
      </span>
      <CopyButton value={id} label={`${label} ${id}`} />
    </span>
  );
}

/** A runner's state badge: the store's busy/idle/unknown, or "Stopped" / "Offline" from its heartbeats. */
export function RunnerStateBadge({ worker, now }: { worker: Worker; now: number }) {
  const state = runnerState(worker, now);
  return <Badge kind="worker" value={state} title={runnerStateHint(worker, state, now)} />;
}

export function TwoLineTime({ value }: { value: number | null }) {
  return (
    <div className="two-line">
      <div>{formatRelativeTime(value)}</div>
      {value !== null && <div className="dim small">{formatDateTime(value)}</div>}
    </div>
  );
}

export function JsonView({ value, testId }: { value: unknown; testId?: string }) {
  return (
    <pre className="json-view" data-testid={testId ?? 'json-view'}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="page-header">
      <h1>{title}</h1>
      <div className="page-controls">{children}</div>
    </div>
  );
}

export function SearchInput({ value, onChange, placeholder, width = 360 }: { value: string; onChange: (v: string) => void; placeholder: string; width?: number }) {
  return (
    <input
      type="search"
      className="input"
      style={{ maxWidth: width, width: '100%' }}
      placeholder={placeholder}
      aria-label={placeholder}
      value={value}
      onChange={(e) => onChange(e.target.value)}
    />
  );
}

export function Skeleton({ height }: { height: number }) {
  return <div className="skeleton" style={{ height }} aria-busy="true" data-testid="skeleton" />;
}
