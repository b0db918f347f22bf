// URL building: API paths against the backend base URL, query strings with repeated parameters.

export type ParamValue = string | number | boolean | null | undefined | ReadonlyArray<string | number>;
export type Params = Record<string, ParamValue>;

/** The store's address from a base URL as users type it: blank → `fallbackOrigin`; trailing slashes and the API
 * prefix the store prints (`http://127.0.0.1:4747/v1/agl`) are dropped. */
export function storeBase(baseUrl: string | null | undefined, fallbackOrigin: string): string {
  const base = (baseUrl ?? '').trim() || fallbackOrigin;
  return base.replace(/\/+$/, '').replace(/\/v1\/agl$/i, '').replace(/\/+$/, '');
}

/** Resolve `path` (e.g. `v1/agl/rollouts`) against the base URL (see {@link storeBase}). */
export function resolveApiUrl(baseUrl: string | null | undefined, path: string, fallbackOrigin: string): string {
  if (/^https?:\/\//i.test(path)) return path;
  const cleanPath = path.replace(/^\/+/, '');
  return `${storeBase(baseUrl, fallbackOrigin)}/${cleanPath}`;
}

/** Query string with repeated multi-valued parameters; null/undefined/empty-string/empty-array values are omitted. */
export function buildQuery(params: Params): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined) continue;
    if (Array.isArray(value)) {
      for (const v of value) search.append(key, String(v));
      continue;
    }
    if (typeof value === 'string' && value === '') continue;
    search.append(key, String(value));
  }
  const qs = search.toString();
  return qs ? `?${qs}` : '';
}

export function buildUrl(baseUrl: string | null | undefined, path: string, params: Params, fallbackOrigin: string): string {
  return resolveApiUrl(baseUrl, path, fallbackOrigin) + buildQuery(params);
}
