// What a failed request means for the user: which URL failed, why (no answer, an HTTP status, a missing token, not
// the store's JSON) and how to fix it. The dashboard's error pages and the summary panel show this.
import { ApiError } from './client';

export type FailureKind = 'network' | 'unauthorized' | 'not-found' | 'server' | 'rejected' | 'not-json' | 'other';

export interface FailureDescription {
  kind: FailureKind;
  /** One line naming what failed, e.g. "Cannot reach the store at http://127.0.0.1:9". */
  title: string;
  /** The request and its outcome, e.g. "GET http://127.0.0.1:9/v1/agl/rollouts failed: no answer (Failed to fetch)." */
  reason: string;
  /** How to fix it. */
  fix: string;
  /** The failed URL without its query string (null when unknown). */
  url: string | null;
  /** Whether the backend base URL (Settings) is the likely culprit. */
  settingsMayHelp: boolean;
}

/** `url` without its query string (the query repeats filters the user already sees). */
export function withoutQuery(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return url.split('?')[0];
  }
}

function originOf(url: string): string | null {
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

/**
 * Describe `error` from a request to the store at `store` (its base URL) made by a page served from `pageOrigin`.
 */
export function describeFailure(error: unknown, store: string, pageOrigin: string): FailureDescription {
  if (!(error instanceof ApiError)) {
    const message = error instanceof Error ? error.message : String(error);
    return { kind: 'other', title: 'The request failed', reason: message, fix: 'Retry; if it persists, reload the page.', url: null, settingsMayHelp: false };
  }
  const url = error.url ? withoutQuery(error.url) : `${store}/v1/agl/…`;
  const answered = (what: string) => `GET ${url} answered ${what}.`;
  const http = `HTTP ${error.status}${error.detail ? ` (${error.detail})` : ''}`;
  const settings = 'Settings → Backend base URL';
  const setBaseUrl = `Set ${settings} to the store's address: the one rollouthub store prints when it starts, e.g. http://127.0.0.1:4747.`;
  if (error.kind === 'network') {
    const why = error.message.replace(/^Network error:\s*/, '') || 'network error';
    const crossOrigin = originOf(store) !== null && originOf(store) !== pageOrigin;
    return {
      kind: 'network',
      title: `Cannot reach the store at ${store}`,
      reason: `GET ${url} failed: no answer (${why}).`,
      fix:
        `Check that the store is running (rollouthub store) and that ${settings} is its address.` +
        (crossOrigin ? ` A store on another address must also allow this page: start it with --cors-origin ${pageOrigin}.` : ''),
      url,
      settingsMayHelp: true,
    };
  }
  if (error.kind === 'parse') {
    return {
      kind: 'not-json',
      title: `The server at ${store} is not a rollouthub store`,
      reason: answered(`HTTP ${error.status} with a body that is not JSON`),
      fix: setBaseUrl,
      url,
      settingsMayHelp: true,
    };
  }
  const status = error.status ?? 0;
  if (status === 401) {
    return {
      kind: 'unauthorized',
      title: 'Unauthorized — set the API token in Settings.',
      reason: answered(http),
      fix: 'The store runs with --api-token: enter the same token in Settings → API token and press Save.',
      url,
      settingsMayHelp: true,
    };
  }
  if (status === 404) {
    return {
      kind: 'not-found',
      title: `No rollouthub store API at ${store}`,
      reason: answered(http),
      fix: setBaseUrl,
      url,
      settingsMayHelp: true,
    };
  }
  if (status >= 500 || status === 408) {
    return {
      kind: 'server',
      title: `The store at ${store} failed (HTTP ${status})`,
      reason: answered(http),
      fix: "The store's log says why; retry once it is fixed.",
      url,
      settingsMayHelp: false,
    };
  }
  return {
    kind: 'rejected',
    title: `The store at ${store} rejected the request (HTTP ${status})`,
    reason: answered(http),
    fix: 'Adjust the search or the filters, or retry.',
    url,
    settingsMayHelp: false,
  };
}
