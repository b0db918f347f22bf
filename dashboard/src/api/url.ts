// URL building (dashboard.md section 2 and 4.1).

export type ParamValue = string | number | boolean | null | undefined | ReadonlyArray<string | number>;
export type Params = Record<string, ParamValue>;

/** Resolve `path` (e.g. `v1/agl/rollouts`) against the base URL; blank base → `fallbackOrigin`. */
export function resolveApiUrl(baseUrl: string | null | undefined, path: string, fallbackOrigin: string): string {
  if (/^https?:\/\//i.test(path)) return path;
  const base = (baseUrl ?? '').trim() || fallbackOrigin;
  const cleanBase = base.replace(/\/+$/, '');
  const cleanPath = path.replace(/^\/+/, '');
  return `${cleanBase}/${cleanPath}`;
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
