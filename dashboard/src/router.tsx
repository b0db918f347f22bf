// A minimal browser router (history API): the dashboard's page routes.
import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';

export interface Location {
  pathname: string;
  search: string;
  key: number;
}

let current: Location = readLocation(0);
const listeners = new Set<() => void>();

function readLocation(key: number): Location {
  // No window when a module importing the router is unit-tested in Node.
  if (typeof window === 'undefined') return { pathname: '/', search: '', key };
  return { pathname: window.location.pathname, search: window.location.search, key };
}

function notify(): void {
  current = readLocation(current.key + 1);
  listeners.forEach((l) => l());
}

if (typeof window !== 'undefined') window.addEventListener('popstate', notify);

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (options.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  notify();
}

/** Replace the query string without creating a history entry; keeps the location key (no drawer close). */
export function replaceSearch(search: string): void {
  const qs = search && !search.startsWith('?') ? `?${search}` : search;
  if (qs === window.location.search) return;
  window.history.replaceState(null, '', window.location.pathname + qs);
  current = { ...readLocation(current.key) };
  listeners.forEach((l) => l());
}

export function useLocation(): Location {
  return useSyncExternalStore(
    (cb) => {
      listeners.add(cb);
      return () => listeners.delete(cb);
    },
    () => current,
  );
}

export function Link({ to, onClick, ...rest }: AnchorHTMLAttributes<HTMLAnchorElement> & { to: string }) {
  return (
    <a
      href={to}
      {...rest}
      onClick={(e: MouseEvent<HTMLAnchorElement>) => {
        onClick?.(e);
        if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(to);
      }}
    />
  );
}
