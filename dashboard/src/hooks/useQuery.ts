// Data fetching with caching-by-key, abort on supersede, keep-previous-data and polling.
import { useCallback, useEffect, useRef, useState } from 'react';
import { useUi } from '../state/ui';
import { getErrorDescriptor } from '../api/client';
import { isUnauthorized } from '../api/training';
import { pollCheckMs, pollDue, type LastRequest } from '../api/polling';

export const UNAUTHORIZED_MESSAGE = 'Unauthorized — the store requires an API token. Set it in Settings → API token.';

export interface QueryState<T> {
  data: T | undefined;
  error: unknown;
  isLoading: boolean;
  isFetching: boolean;
  refetch: () => void;
}

export function useQuery<T>(
  key: string | null,
  fetcher: (signal: AbortSignal) => Promise<T>,
  options: { pollMs?: number } = {},
): QueryState<T> {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; isFetching: boolean; key: string | null }>({
    data: undefined,
    error: null,
    isFetching: key !== null,
    key: null,
  });
  const fetcherRef = useRef(fetcher);
  fetcherRef.current = fetcher;
  const controllerRef = useRef<AbortController | null>(null);
  const lastRequest = useRef<LastRequest>({ startMs: 0, endMs: 0 });
  const [tick, setTick] = useState(0);

  useEffect(() => {
    if (key === null) {
      setState({ data: undefined, error: null, isFetching: false, key: null });
      return;
    }
    const controller = new AbortController();
    controllerRef.current?.abort();
    controllerRef.current = controller;
    setState((s) => ({ ...s, isFetching: true }));
    const request: LastRequest = { startMs: performance.now(), endMs: -1 }; // endMs < startMs: in flight
    lastRequest.current = request;
    const settled = () => {
      request.endMs = performance.now();
    };
    fetcherRef.current(controller.signal).then(
      (data) => {
        if (controller.signal.aborted) return;
        settled();
        setState({ data, error: null, isFetching: false, key });
      },
      (error) => {
        if (controller.signal.aborted || (error as Error)?.name === 'AbortError') return;
        settled();
        setState((s) => ({ data: s.key === key ? s.data : undefined, error, isFetching: false, key }));
      },
    );
    return () => controller.abort();
  }, [key, tick]);

  const pollMs = options.pollMs ?? 0;
  useEffect(() => {
    if (!pollMs || key === null) return;
    // Refetch every pollMs, never while the previous request is in flight (a slow server is not hammered with
    // aborts) and only once the server has rested 4× as long as that request took (api/polling.ts).
    const id = window.setInterval(() => {
      if (pollDue(performance.now(), lastRequest.current, pollMs)) setTick((t) => t + 1);
    }, pollCheckMs(pollMs));
    return () => window.clearInterval(id);
  }, [pollMs, key]);

  const refetch = useCallback(() => setTick((t) => t + 1), []);
  const sameKey = state.key === key;
  const data = state.key === null && key !== null ? undefined : state.data;
  return {
    data,
    error: sameKey ? state.error : null,
    isLoading: key !== null && data === undefined && (state.isFetching || !sameKey),
    isFetching: state.isFetching || (!sameKey && key !== null),
    refetch,
  };
}

/** Show the page's error alert while any query is in error; hide it on success and unmount. */
export function useFetchAlert(
  id: string,
  errors: unknown[],
  settled: boolean,
  message: (descriptor: string | null) => string,
): void {
  const { showAlert, hideAlert } = useUi();
  const error = errors.find((e) => !!e);
  const text = error ? (isUnauthorized(error) ? UNAUTHORIZED_MESSAGE : message(getErrorDescriptor(error))) : null;
  useEffect(() => {
    if (text) showAlert({ id, tone: 'error', message: text });
    else if (settled) hideAlert(id);
  }, [text, settled, id, showAlert, hideAlert]);
  useEffect(() => () => hideAlert(id), [id, hideAlert]);
}

/** Page state that survives navigation (module-level, like the reference's Redux slices). */
const pageStates = new Map<string, unknown>();
export function usePageState<S>(name: string, initial: S): [S, (update: Partial<S> | ((s: S) => Partial<S>)) => void] {
  const [state, setState] = useState<S>(() => (pageStates.get(name) as S) ?? initial);
  const update = useCallback(
    (u: Partial<S> | ((s: S) => Partial<S>)) => {
      setState((s) => {
        const next = { ...s, ...(typeof u === 'function' ? u(s) : u) };
        pageStates.set(name, next);
        return next;
      });
    },
    [name],
  );
  return [state, update];
}
