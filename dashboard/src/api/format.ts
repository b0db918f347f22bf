// Formatting helpers. All times are epoch seconds, local time zone.

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

function toDate(seconds: number | null | undefined): Date | null {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return null;
  return new Date(seconds * 1000);
}

export function formatDateTime(seconds: number | null | undefined): string {
  const d = toDate(seconds);
  if (!d) return '—';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function formatDateTimeMs(seconds: number | null | undefined): string {
  const d = toDate(seconds);
  if (!d) return '—';
  return `${formatDateTime(seconds)}.${pad(d.getMilliseconds(), 3)}`;
}

/** Whole seconds as `Xh Ym Zs` omitting zero units; under a second in milliseconds (`700 ms`, not `0s`); `—` for
 * null or <= 0. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds <= 0) return '—';
  if (seconds < 0.9995) return `${Math.max(1, Math.round(seconds * 1000))} ms`;
  const total = Math.floor(seconds);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const parts: string[] = [];
  if (h) parts.push(`${h}h`);
  if (m) parts.push(`${m}m`);
  if (s || parts.length === 0) parts.push(`${s}s`);
  return parts.join(' ');
}

/** Sub-second aware duration used by the waterfall (e.g. `250 ms`, `1.50 s`). */
export function formatSpanDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(2)} s`;
  return formatDuration(seconds);
}

export function formatRelativeTime(seconds: number | null | undefined, nowMs: number = Date.now()): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  const diff = nowMs / 1000 - seconds;
  if (diff <= 5) return 'Just now';
  return `${formatDuration(diff)} ago`;
}

export function formatStatusLabel(status: string | null | undefined): string {
  if (!status) return '—';
  return status
    .replace(/[_-]/g, ' ')
    .toLowerCase()
    .split(' ')
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join(' ');
}

export function jsonPreview(value: unknown): string {
  try {
    const s = JSON.stringify(value);
    return s === undefined ? String(value) : s;
  } catch {
    return String(value);
  }
}
