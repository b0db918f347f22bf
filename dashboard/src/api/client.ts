// HTTP access: base URL resolution, bearer token, error shape.
import { buildUrl, storeBase, type Params } from './url';

/** How a request failed: no answer (network), an HTTP error status, or an answer that is not the expected JSON. */
export type ApiErrorKind = 'network' | 'http' | 'parse';

export class ApiError extends Error {
  readonly status: number | null;
  readonly detail: string | null;
  readonly body: unknown;
  /** The URL that failed (null for errors built without one). */
  readonly url: string | null;
  readonly kind: ApiErrorKind;

  constructor(message: string, status: number | null, detail: string | null, body: unknown = null, url: string | null = null, kind?: ApiErrorKind) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.detail = detail;
    this.body = body;
    this.url = url;
    this.kind = kind ?? (status === null ? 'network' : 'http');
  }
}

export interface ClientConfig {
  baseUrl: string;
  token: string;
  /** Origin used when `baseUrl` is blank (window.location.origin in the browser). */
  origin: string;
}

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export class ApiClient {
  readonly config: ClientConfig;
  private readonly fetchImpl: FetchLike;

  constructor(config: ClientConfig, fetchImpl?: FetchLike) {
    this.config = config;
    this.fetchImpl = fetchImpl ?? ((input, init) => fetch(input, init));
  }

  /** Cache key of the server this client talks to (capabilities are remembered per server). */
  get serverKey(): string {
    return storeBase(this.config.baseUrl, this.config.origin);
  }

  url(path: string, params: Params = {}): string {
    return buildUrl(this.config.baseUrl, path, params, this.config.origin);
  }

  headers(): Record<string, string> {
    const h: Record<string, string> = { Accept: 'application/json' };
    const token = this.config.token.trim();
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  private async request(path: string, params: Params, signal?: AbortSignal): Promise<{ response: Response; text: string; url: string }> {
    const url = this.url(path, params);
    let response: Response;
    try {
      response = await this.fetchImpl(url, { method: 'GET', headers: this.headers(), signal });
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      throw new ApiError(`Network error: ${(err as Error)?.message ?? String(err)}`, null, null, null, url);
    }
    const text = await response.text();
    if (!response.ok) {
      let body: unknown = text;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        /* not JSON */
      }
      const detail = extractDetail(body);
      throw new ApiError(detail ?? `HTTP ${response.status}`, response.status, detail, body, url);
    }
    return { response, text, url };
  }

  async getJson(path: string, params: Params = {}, signal?: AbortSignal): Promise<unknown> {
    const { response, text, url } = await this.request(path, params, signal);
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch {
      throw new ApiError('Failed to parse the server response as JSON', response.status, null, text, url, 'parse');
    }
  }

  /** The raw body of a successful GET (e.g. a JSONL export); errors as for `getJson`. */
  async getText(path: string, params: Params = {}, signal?: AbortSignal): Promise<string> {
    return (await this.request(path, params, signal)).text;
  }

  /** Whether the API accepts this client's token: `GET v1/agl/resources/latest` (the health check never needs one);
   * null when the server cannot be reached. */
  async authorized(signal?: AbortSignal): Promise<boolean | null> {
    try {
      const response = await this.fetchImpl(this.url('v1/agl/resources/latest'), { headers: this.headers(), signal });
      return response.status !== 401;
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      return null;
    }
  }

  /** Health check: `GET {baseUrl}/v1/agl/health`; true on HTTP 2xx. */
  async health(signal?: AbortSignal): Promise<boolean> {
    try {
      const response = await this.fetchImpl(this.url('v1/agl/health'), { headers: this.headers(), signal });
      return response.ok;
    } catch (err) {
      if ((err as Error)?.name === 'AbortError') throw err;
      return false;
    }
  }
}

function extractDetail(body: unknown): string | null {
  if (body && typeof body === 'object') {
    const b = body as Record<string, unknown>;
    for (const key of ['detail', 'message']) {
      const v = b[key];
      if (typeof v === 'string') return v;
      if (Array.isArray(v) && v.length && typeof (v[0] as { msg?: unknown })?.msg === 'string') {
        return (v[0] as { msg: string }).msg;
      }
    }
  }
  if (typeof body === 'string' && body.length < 200) return body;
  return null;
}

/** Short description of an error for alerts and empty states (`getErrorDescriptor` of the spec). */
export function getErrorDescriptor(error: unknown): string | null {
  if (!error) return null;
  if (error instanceof ApiError) {
    if (error.status === 408 || error.status === 504) return 'Timeout';
    if (error.detail && /timeout/i.test(error.detail)) return 'Timeout';
    if (error.detail) return error.detail;
    if (error.status !== null) return `status: ${error.status}`;
    return error.message || null;
  }
  if (error instanceof Error) {
    if (/timeout/i.test(error.message)) return 'Timeout';
    return error.message || null;
  }
  return null;
}
