import { describe, expect, it } from 'vitest';
import { ApiClient, ApiError } from './client';
import { describeFailure, withoutQuery } from './errors';

const PAGE = 'http://127.0.0.1:4747';

/** The error a client with base URL `base` gets from `fetchImpl` for the rollouts list. */
async function failure(base: string, fetchImpl: (url: string) => Promise<Response>): Promise<unknown> {
  const client = new ApiClient({ baseUrl: base, token: '', origin: PAGE }, fetchImpl);
  try {
    await client.getJson('v1/agl/rollouts', { limit: 100, offset: 0 });
  } catch (err) {
    return err;
  }
  throw new Error('the request did not fail');
}

describe('error page', () => {
  it('names the URL that got no answer, and says to check the store and Settings', async () => {
    const err = await failure('http://127.0.0.1:9', () => Promise.reject(new TypeError('Failed to fetch')));
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).url).toBe('http://127.0.0.1:9/v1/agl/rollouts?limit=100&offset=0');
    const d = describeFailure(err, 'http://127.0.0.1:9', PAGE);
    expect(d.kind).toBe('network');
    expect(d.title).toBe('Cannot reach the store at http://127.0.0.1:9');
    expect(d.reason).toBe('GET http://127.0.0.1:9/v1/agl/rollouts failed: no answer (Failed to fetch).');
    expect(d.fix).toContain('Settings → Backend base URL');
    // Another origin than the page's: CORS may be the reason too.
    expect(d.fix).toContain(`--cors-origin ${PAGE}`);
    expect(describeFailure(err, PAGE, PAGE).fix).not.toContain('--cors-origin');
    expect(d.settingsMayHelp).toBe(true);
  });

  it('names the HTTP status: 401 → the token, 404 → not a store, 5xx → the store\'s log, 4xx → the filters', async () => {
    const answer = (status: number, body: string) => () => Promise.resolve(new Response(body, { status }));
    const unauthorized = describeFailure(await failure(PAGE, answer(401, '{"detail":"Missing bearer token"}')), PAGE, PAGE);
    expect(unauthorized.kind).toBe('unauthorized');
    expect(unauthorized.title).toBe('Unauthorized — set the API token in Settings.');
    expect(unauthorized.reason).toBe(`GET ${PAGE}/v1/agl/rollouts answered HTTP 401 (Missing bearer token).`);
    expect(unauthorized.fix).toContain('Settings → API token');

    const notFound = describeFailure(await failure('http://127.0.0.1:8080', answer(404, '<html>nope</html>')), 'http://127.0.0.1:8080', PAGE);
    expect(notFound.kind).toBe('not-found');
    expect(notFound.title).toBe('No rollouthub store API at http://127.0.0.1:8080');
    expect(notFound.reason).toBe('GET http://127.0.0.1:8080/v1/agl/rollouts answered HTTP 404 (<html>nope</html>).');

    const server = describeFailure(await failure(PAGE, answer(500, '{"detail":"database is locked"}')), PAGE, PAGE);
    expect(server.kind).toBe('server');
    expect(server.title).toBe(`The store at ${PAGE} failed (HTTP 500)`);
    expect(server.reason).toContain('database is locked');
    expect(server.settingsMayHelp).toBe(false);

    const rejected = describeFailure(await failure(PAGE, answer(400, '{"detail":"Invalid sort_by"}')), PAGE, PAGE);
    expect(rejected.kind).toBe('rejected');
    expect(rejected.fix).toContain('filters');
  });

  it('a server that answers something else than JSON is not a store', async () => {
    const err = await failure('http://127.0.0.1:3000', () => Promise.resolve(new Response('<!doctype html><p>hello</p>', { status: 200 })));
    const d = describeFailure(err, 'http://127.0.0.1:3000', PAGE);
    expect(d.kind).toBe('not-json');
    expect(d.title).toBe('The server at http://127.0.0.1:3000 is not a rollouthub store');
    expect(d.reason).toBe('GET http://127.0.0.1:3000/v1/agl/rollouts answered HTTP 200 with a body that is not JSON.');
  });

  it('other errors and URLs', () => {
    expect(describeFailure(new Error('boom'), PAGE, PAGE)).toMatchObject({ kind: 'other', reason: 'boom', url: null });
    expect(withoutQuery('http://h:1/v1/agl/spans?rollout_id=x')).toBe('http://h:1/v1/agl/spans');
    expect(withoutQuery('not a url?x=1')).toBe('not a url');
  });
});
