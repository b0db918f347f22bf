// End-to-end: every page against a real `rollouthub store` seeded through its REST API, in headless Chromium.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { elementScreenshot, recordApiRequests, screenshot } from './browser';
import { VIEWPORT, sharedBrowser, apiRequest, nav, rowIds, waitForCount } from './helpers';
import { Rest, addSpans, agentSpans, enqueue, seed, type SeedResult } from './seed';
import { REPO_ROOT, startStore, type StoreProcess } from './server';

const browser = sharedBrowser();

describe('dashboard against a seeded store', () => {
  let store: StoreProcess;
  let rest: Rest;
  let data: SeedResult;
  let context: BrowserContext;
  let page: Page;
  const id = (key: string) => data.rollouts[key].rolloutId;

  beforeAll(async () => {
    store = await startStore();
    rest = new Rest(store.url);
    data = await seed(rest);
    context = await browser().newContext({ viewport: VIEWPORT });
    page = await context.newPage();
    page.on('pageerror', (e) => console.error('pageerror:', e.message));
    if (process.env.E2E_LOG_REQUESTS) page.on('request', (r) => console.log('REQ', r.url()));
  });
  afterAll(async () => {
    await context?.close();
    await store?.stop();
  });

  it('is served by the store at / with the SPA fallback', async () => {
    const index = await fetch(`${store.url}/`);
    expect(index.status).toBe(200);
    const html = await index.text();
    expect(html).toContain('<div id="root">');
    expect((await fetch(`${store.url}/traces?rolloutId=x`)).status).toBe(200);
    const asset = readdirSync(join(REPO_ROOT, 'rollouthub', 'dashboard', 'assets')).find((f) => f.endsWith('.js'))!;
    const assetRes = await fetch(`${store.url}/assets/${asset}`);
    expect(assetRes.status).toBe(200);
    expect(assetRes.headers.get('cache-control')).toContain('immutable');
    expect((await fetch(`${store.url}/v1/unknown`)).status).toBe(404);
    // Issue 29: the favicon browsers ask for (and the one the page links to).
    const icon = await fetch(`${store.url}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get('content-type')).toMatch(/^image\//);
    const ico = Buffer.from(await icon.arrayBuffer());
    expect([...ico.subarray(0, 4)]).toEqual([0, 0, 1, 0]); // an ICO file
    expect(ico.readUInt16LE(4)).toBe(3); // 16, 32 and 48 px
    expect((await fetch(`${store.url}/favicon.svg`)).headers.get('content-type')).toMatch(/^image\/svg/);
    expect(html).toContain('<link rel="icon" href="/favicon.ico"');
    const iconPage = await context.newPage();
    await iconPage.setContent(
      `<div id="icons" style="display:inline-flex;padding:16px;gap:16px;align-items:center;font:14px sans-serif">` +
        [16, 32, 48].map((s) => `<img src="${store.url}/favicon.ico" width="${s}" height="${s}">`).join('') +
        `<img src="${store.url}/favicon.svg" width="96" height="96"><span>/favicon.ico (16, 32, 48 px) and /favicon.svg</span></div>`,
    );
    await expect.poll(() => iconPage.locator('img').evaluateAll((imgs) => imgs.every((i) => (i as HTMLImageElement).naturalWidth > 0))).toBe(true);
    await elementScreenshot(iconPage.locator('#icons'), '35-favicon');
    await iconPage.close();
    // Issue 18: probes and scrapers of non-dashboard paths get 404 JSON, not the dashboard.
    for (const path of ['/health', '/metrics']) {
      const res = await fetch(`${store.url}${path}`);
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ detail: 'Not Found' });
    }
  });

  it('Rollouts: renders every rollout with the default request and the summary', async () => {
    const req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('limit') === '100');
    await page.goto(`${store.url}/`);
    await page.waitForURL('**/rollouts');
    const u = new URL((await req).url());
    expect(Object.fromEntries(u.searchParams)).toEqual({ limit: '100', offset: '0', sort_by: 'start_time', sort_order: 'desc' });
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
    const ids = await rowIds(page, 'rollouts-table');
    expect(new Set(ids)).toEqual(new Set(Object.values(data.rollouts).map((r) => r.rolloutId)));
    // Newest first.
    expect(ids[0]).toBe(id('hotel'));
    const echoRow = page.locator(`[data-row-id="${id('echo')}"]`);
    await expect.poll(() => echoRow.locator('[data-column="workerId"]').innerText()).toBe('Worker-3');
    await expect.poll(() => echoRow.locator('[data-column="mode"]').innerText()).toBe('train');
    // Summary: status counts and reward chart.
    await expect.poll(() => page.getByTestId('count-total').locator('.count-value').innerText()).toBe('9');
    expect(await page.getByTestId('count-succeeded').locator('.count-value').innerText()).toBe('4');
    expect(await page.getByTestId('count-failed').locator('.count-value').innerText()).toBe('1');
    expect(await page.getByTestId('count-queuing').locator('.count-value').innerText()).toBe('2');
    expect(await page.getByTestId('count-cancelled').locator('.count-value').innerText()).toBe('1');
    expect(await page.getByTestId('count-running').locator('.count-value').innerText()).toBe('1');
    await screenshot(page, '01-rollouts');
    expect(await page.title()).toBe('rollouthub');
    expect(await page.locator('.brand').innerText()).toContain('rollouthub');
  });

  it('Learning curve: mean final reward per resources version in creation order, per mode, with counts and spread', async () => {
    const chart = page.getByTestId('learning-curve-chart');
    await expect.poll(() => chart.getAttribute('data-versions')).toBe('2');
    await waitForCount(chart.locator('canvas'), 1);
    await page.getByTestId('learning-curve-details').locator('summary').click();
    const rows = page.getByTestId('learning-curve-row');
    await waitForCount(rows, 4);
    const cells = await rows.evaluateAll((els) =>
      els.map((e) => [e.getAttribute('data-resources-id'), e.getAttribute('data-mode'), e.querySelector('[data-column="count"]')!.textContent, e.querySelector('[data-column="mean"]')!.textContent, e.querySelector('[data-column="std"]')!.textContent]),
    );
    // rs-e2e-002 (created before rs-e2e-003): alpha 0.8 + india 0.6 (train), bravo 0.4 (val), charlie 0.1 (test, failed).
    expect(cells).toEqual([
      ['rs-e2e-002', 'train', '2', '0.700', '0.100'],
      ['rs-e2e-002', 'val', '1', '0.400', '0.000'],
      ['rs-e2e-002', 'test', '1', '0.100', '0.000'],
      ['rs-e2e-003', 'val', '1', '1.000', '0.000'],
    ]);
    const legend = await page.locator('.u-legend').innerText();
    for (const mode of ['train', 'val', 'test']) expect(legend).toContain(mode);
    await elementScreenshot(page.getByTestId('rollout-summary'), '22-learning-curve');
    await page.getByTestId('learning-curve-details').locator('summary').click();
  });

  it('Rollouts: the reward column shows each rollout\'s final reward', async () => {
    const expected: Record<string, string> = { alpha: '0.8', bravo: '0.4', charlie: '0.1', india: '0.6', delta: '1.0', echo: '—', foxtrot: '—', golf: '—', hotel: '—' };
    for (const [key, reward] of Object.entries(expected)) {
      await expect.poll(() => page.locator(`[data-row-id="${id(key)}"] [data-column="reward"]`).innerText()).toBe(reward);
    }
    await page.locator(`[data-row-id="${id('alpha')}"]`).scrollIntoViewIfNeeded();
    await screenshot(page, '23-rollouts-reward-column');
  });

  it('Conversation view: the LLM calls with messages, response, token counts and reward', async () => {
    const req = apiRequest(page, `/v1/agl/rollouts/${id('alpha')}/conversation`);
    await page.locator(`[data-row-id="${id('alpha')}"]`).getByRole('button', { name: 'View conversation' }).click();
    await req;
    await expect.poll(() => page.getByTestId('drawer').getAttribute('data-drawer-type')).toBe('rollout-conversation');
    await waitForCount(page.getByTestId('llm-call'), 1);
    const messages = await page.getByTestId('chat-message').evaluateAll((els) => els.map((e) => [e.getAttribute('data-role'), e.querySelector('.chat-content')?.textContent]));
    expect(messages).toEqual([['user', 'What is 2+2?'], ['assistant', '4']]);
    expect(await page.getByTestId('llm-call-tokens').innerText()).toBe('12 prompt + 3 completion tokens = 15');
    expect(await page.getByTestId('conversation-reward').innerText()).toBe('0.8');
    // The same messages as the export route's `messages` row of this rollout (one adapter on the server).
    const exported = await (await fetch(`${store.url}/v1/agl/export?format=messages&rollout_id_in=${id('alpha')}`)).json();
    expect(exported.messages).toEqual([{ role: 'user', content: 'What is 2+2?' }, { role: 'assistant', content: '4' }]);
    await screenshot(page, '24-conversation');
    await page.getByRole('button', { name: 'Close drawer' }).click();
  });

  it('Export: the button downloads the current selection as JSONL through the streaming route', async () => {
    const req = apiRequest(page, '/v1/agl/export', (u) => u.searchParams.get('format') === 'messages');
    const downloadPromise = page.waitForEvent('download');
    await page.getByRole('button', { name: 'Export JSONL' }).click();
    const download = await downloadPromise;
    const u = new URL((await req).url());
    expect(u.searchParams.getAll('status_in')).toEqual([]); // no status filter: the route's default (finished)
    expect(download.suggestedFilename()).toBe('rollouthub-messages.jsonl');
    const lines = readFileSync((await download.path())!, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(new Set(lines.map((l) => l.rollout_id))).toEqual(new Set(['alpha', 'bravo', 'charlie', 'india', 'delta'].map(id)));
    expect(lines.find((l) => l.rollout_id === id('delta')).reward).toBe(1);
    await expect.poll(() => page.getByTestId('export-status').innerText()).toBe('Downloaded 5 rows');
    await screenshot(page, '25-export-downloaded');

    // With the mode filter: the selection goes along.
    await page.getByRole('button', { name: 'Filter by mode' }).click();
    await page.getByRole('dialog', { name: 'Mode' }).getByLabel('Val').check();
    await page.getByRole('dialog', { name: 'Mode' }).getByRole('button', { name: 'Done' }).click();
    await page.getByLabel('Export format').selectOption('rewards');
    const second = page.waitForEvent('download');
    await page.getByRole('button', { name: 'Export JSONL' }).click();
    const rewards = readFileSync((await (await second).path())!, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(rewards.map((r) => [r.rollout_id, r.mode, r.reward]).sort()).toEqual([[id('bravo'), 'val', 0.4], [id('delta'), 'val', 1]].sort());
    await page.getByRole('button', { name: 'Filter by mode' }).click();
    await page.getByRole('dialog', { name: 'Mode' }).getByRole('button', { name: 'Clear' }).click();
    await page.getByRole('dialog', { name: 'Mode' }).getByRole('button', { name: 'Done' }).click();
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
  });

  it('Rollouts: the status filter sends repeated status_in and filters the rows', async () => {
    await page.getByRole('button', { name: 'Filter by status' }).click();
    let req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.getAll('status_in').join() === 'succeeded' && u.searchParams.get('limit') === '100');
    await page.getByRole('dialog', { name: 'Status' }).getByLabel('Succeeded').check();
    await req;
    await waitForCount(page.getByTestId('rollouts-table-row'), 4);
    expect(new Set(await rowIds(page, 'rollouts-table'))).toEqual(new Set([id('alpha'), id('bravo'), id('india'), id('delta')]));
    req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.getAll('status_in').join() === 'succeeded,failed');
    await page.getByRole('dialog', { name: 'Status' }).getByLabel('Failed').check();
    await req;
    await waitForCount(page.getByTestId('rollouts-table-row'), 5);
    await screenshot(page, '02-rollouts-status-filter');
    await page.getByRole('dialog', { name: 'Status' }).getByRole('button', { name: 'Clear' }).click();
    await page.getByRole('dialog', { name: 'Status' }).getByRole('button', { name: 'Done' }).click();
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
  });

  it('Rollouts: the mode filter sends mode_in and only shows rollouts of that mode', async () => {
    await page.getByRole('button', { name: 'Filter by mode' }).click();
    const req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.getAll('mode_in').join() === 'val');
    await page.getByRole('dialog', { name: 'Mode' }).getByLabel('Val').check();
    await req;
    await waitForCount(page.getByTestId('rollouts-table-row'), 3);
    expect(new Set(await rowIds(page, 'rollouts-table'))).toEqual(new Set([id('bravo'), id('delta'), id('foxtrot')]));
    for (const cell of await page.locator('[data-testid="rollouts-table-row"] [data-column="mode"]').allInnerTexts()) expect(cell).toBe('val');
    await screenshot(page, '03-rollouts-mode-filter');
    await page.getByRole('dialog', { name: 'Mode' }).getByRole('button', { name: 'Clear' }).click();
    await page.getByRole('dialog', { name: 'Mode' }).getByRole('button', { name: 'Done' }).click();
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
  });

  it('Rollouts: sorting by a model field and by derived keys changes the request and the rows', async () => {
    const header = (name: string) => page.locator('thead th').getByRole('button', { name: new RegExp(`^${name}`) });
    let req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('sort_by') === 'rollout_id' && u.searchParams.get('sort_order') === 'asc');
    await header('Rollout').click();
    await req;
    const sorted = Object.values(data.rollouts).map((r) => r.rolloutId).sort();
    await expect.poll(() => rowIds(page, 'rollouts-table')).toEqual(sorted);
    req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('sort_by') === 'rollout_id' && u.searchParams.get('sort_order') === 'desc');
    await header('Rollout').click();
    await req;
    await expect.poll(() => rowIds(page, 'rollouts-table')).toEqual([...sorted].reverse());

    // Worker is not a Rollout field: the store rejects it, the dashboard sorts locally.
    req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('sort_by') === 'worker_id' && u.searchParams.get('sort_order') === 'asc');
    await header('Worker').click();
    await req;
    const expected = ['Worker-0', 'Worker-1', 'Worker-1', 'Worker-2', 'Worker-2', 'Worker-3', '—', '—', '—'];
    await expect.poll(() => page.locator('[data-testid="rollouts-table-row"] [data-column="workerId"]').allInnerTexts()).toEqual(expected);
    expect((await rowIds(page, 'rollouts-table'))[0]).toBe(id('alpha'));
    await waitForCount(page.getByTestId('alert-banner'), 0);
    await screenshot(page, '04-rollouts-sorted-by-worker');

    // Duration (derived) descending: the running/queued rollouts (measured until now) come first.
    await header('Duration').click(); // asc
    await header('Duration').click(); // desc
    await expect.poll(async () => (await page.locator('thead th[data-column="durationSeconds"]').getAttribute('aria-sort'))).toBe('descending');
    await expect.poll(async () => (await rowIds(page, 'rollouts-table')).length).toBe(9);
    const seconds = (t: string) => {
      if (t.trim() === '—') return 0;
      let total = 0;
      for (const [, n, unit] of t.matchAll(/(\d+)([hms])/g)) total += Number(n) * ({ h: 3600, m: 60, s: 1 } as Record<string, number>)[unit];
      return total;
    };
    // Wait for the new rows (the header flips before the data arrives): durations must be non-increasing.
    const nonIncreasing = async () => {
      const d = (await page.locator('[data-testid="rollouts-table-row"] [data-column="durationSeconds"]').allInnerTexts()).map(seconds);
      return d.every((v, i) => i === 0 || v <= d[i - 1] + 1);
    };
    await expect.poll(nonIncreasing).toBe(true);
    await expect.poll(() => page.getByTestId('rollouts-table').getAttribute('aria-busy')).toBe('false');
    // Back to the default sort.
    req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('sort_by') === 'start_time');
    await header('Start Time').click();
    await req;
    // Page size (with a server-side sort): changing it sends the new limit and resets the offset.
    const sizeReq = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('limit') === '50' && u.searchParams.get('offset') === '0' && u.searchParams.get('sort_by') === 'start_time');
    await page.getByLabel('Records per page').selectOption('50');
    await sizeReq;
    await page.getByLabel('Records per page').selectOption('100');
  });

  it('Rollouts: search sends rollout_id_contains; expanding a retried rollout lists its previous attempt', async () => {
    const needle = id('delta').slice(3, 10);
    const req = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('rollout_id_contains') === needle);
    await page.getByPlaceholder('Search by Rollout ID').fill(needle);
    await req;
    await waitForCount(page.getByTestId('rollouts-table-row'), 1);
    const attemptsReq = apiRequest(page, `/v1/agl/rollouts/${id('delta')}/attempts`, (u) => u.searchParams.get('sort_by') === 'sequence_id' && u.searchParams.get('sort_order') === 'desc');
    await page.locator(`[data-row-id="${id('delta')}"] [data-column="inputText"]`).click();
    await attemptsReq;
    await waitForCount(page.getByTestId('nested-attempts-row'), 1);
    expect(await rowIds(page, 'nested-attempts')).toEqual([data.rollouts.delta.attemptIds[0]]);
    await waitForCount(page.getByTestId('nested-attempts-row').locator('[data-status="failed"]'), 1);
    await screenshot(page, '05-rollouts-expanded-attempts');
    await page.getByPlaceholder('Search by Rollout ID').fill('');
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
  });

  it('Drill-down: rollout → traces drawer → Traces page → waterfall with span attributes', async () => {
    const alpha = id('alpha');
    const spansReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('rollout_id') === alpha);
    await page.locator(`[data-row-id="${alpha}"]`).getByRole('button', { name: 'View traces' }).click();
    await spansReq;
    await expect.poll(() => page.getByTestId('drawer').getAttribute('data-drawer-type')).toBe('rollout-traces');
    await waitForCount(page.getByTestId('drawer-traces-table-row'), 5);
    await screenshot(page, '06-rollout-traces-drawer');

    const pageReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('rollout_id') === alpha && u.searchParams.get('attempt_id') === data.rollouts.alpha.attemptIds[0]);
    await page.getByRole('link', { name: `Open traces page for rollout ${alpha} attempt 1` }).click();
    await page.waitForURL(`**/traces?rolloutId=${alpha}&attemptId=${data.rollouts.alpha.attemptIds[0]}`);
    await pageReq;
    await waitForCount(page.getByTestId('drawer'), 0);
    await waitForCount(page.getByTestId('traces-table-row'), 5);
    expect(await page.getByLabel('Select rollout').inputValue()).toBe(alpha);
    // Issue 18: a 700 ms span is not "0s".
    expect(await page.locator('[data-testid="traces-table-row"]', { hasText: 'http_request' }).locator('[data-column="duration"]').innerText()).toBe('700 ms');
    const names = await page.locator('[data-testid="traces-table-row"] [data-column="name"]').allInnerTexts();
    expect(new Set(names)).toEqual(new Set(['agent_execution', 'llm_call', 'tool_execution', 'http_request', 'agentlightning.annotation']));
    await screenshot(page, '07-traces');

    // Search sends the three *_contains parameters with filter_logic=or.
    const searchReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('name_contains') === 'llm_call');
    await page.getByPlaceholder('Search spans').fill('llm_call');
    const su = new URL((await searchReq).url());
    expect(su.searchParams.get('trace_id_contains')).toBe('llm_call');
    expect(su.searchParams.get('span_id_contains')).toBe('llm_call');
    expect(su.searchParams.get('filter_logic')).toBe('or');
    await waitForCount(page.getByTestId('traces-table-row'), 1);
    await page.getByPlaceholder('Search spans').fill('');
    await waitForCount(page.getByTestId('traces-table-row'), 5);

    // Clicking a parent id filters the spans by it.
    const parentLink = page.locator('[data-testid="traces-table-row"]', { hasText: 'http_request' }).locator('[data-column="parentId"] button');
    const parentId = (await parentLink.getAttribute('title'))!;
    const parentReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('span_id_contains') === parentId);
    await parentLink.click();
    await parentReq;
    expect(await page.getByPlaceholder('Search spans').inputValue()).toBe(parentId);
    await waitForCount(page.getByTestId('traces-table-row'), 1);
    expect(await page.locator('[data-testid="traces-table-row"] [data-column="name"]').innerText()).toBe('tool_execution');
    await page.getByPlaceholder('Search spans').fill('');
    await waitForCount(page.getByTestId('traces-table-row'), 5);

    // Span detail drawer.
    await page.locator('[data-testid="traces-table-row"]', { hasText: 'tool_execution' }).getByRole('button', { name: 'Show span detail' }).click();
    await expect.poll(() => page.getByTestId('drawer').getAttribute('data-drawer-type')).toBe('trace-detail');
    await expect.poll(() => page.getByTestId('drawer-json').innerText()).toContain('calculator');
    await screenshot(page, '08-span-detail-drawer');
    await page.getByRole('button', { name: 'Close drawer' }).click();

    // Waterfall: nesting and attributes.
    const wfReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('limit') === '-1' && u.searchParams.get('rollout_id') === alpha);
    await page.getByRole('button', { name: 'Waterfall View' }).click();
    await wfReq;
    await waitForCount(page.getByTestId('waterfall-row'), 5);
    const depths = await page.getByTestId('waterfall-row').evaluateAll((els) => els.map((e) => `${e.textContent?.replace(/\d.*$/, '').replace(/[▾▸]/g, '').trim()}:${e.getAttribute('data-depth')}`));
    expect(depths).toEqual(['agent_execution:0', 'llm_call:1', 'tool_execution:1', 'http_request:2', 'agentlightning.annotation:1']);
    await page.getByTestId('waterfall-row').filter({ hasText: 'tool_execution' }).click();
    await expect.poll(() => page.getByTestId('span-attributes').innerText()).toContain('tool.name');
    await expect.poll(() => page.getByTestId('span-attributes').innerText()).toContain('calculator');
    await screenshot(page, '09-traces-waterfall');
    await page.getByRole('button', { name: 'Table View' }).click();
  });

  it('Traces: selecting another rollout and sorting by status (derived key) reorders spans', async () => {
    const charlie = id('charlie');
    // The rollout selector searches server-side (debounced) with limit=20 and rollout_id_contains.
    const needle = charlie.slice(3, 9);
    const searchReq = apiRequest(page, '/v1/agl/rollouts', (u) => u.searchParams.get('rollout_id_contains') === needle && u.searchParams.get('limit') === '20');
    await page.getByRole('combobox', { name: 'Select rollout' }).click();
    await page.getByRole('combobox', { name: 'Select rollout' }).fill(needle);
    await searchReq;
    await waitForCount(page.getByRole('listbox', { name: 'Rollouts' }).getByRole('option'), 1);
    const req = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('rollout_id') === charlie);
    await page.getByRole('option', { name: new RegExp(charlie) }).click();
    await req;
    expect(await page.getByRole('combobox', { name: 'Select rollout' }).inputValue()).toBe(charlie);
    await page.waitForURL(`**/traces?rolloutId=${charlie}&attemptId=${data.rollouts.charlie.attemptIds[0]}`);
    await waitForCount(page.getByTestId('traces-table-row'), 5);
    const sortReq = apiRequest(page, '/v1/agl/spans', (u) => u.searchParams.get('sort_by') === 'status_code' && u.searchParams.get('sort_order') === 'asc');
    await page.locator('thead th').getByRole('button', { name: /^Status/ }).click();
    await sortReq;
    await expect.poll(() => page.locator('[data-testid="traces-table-row"] [data-column="statusCode"]').allInnerTexts()).toEqual(['ERROR', 'OK', 'OK', 'OK', 'OK']);
    await waitForCount(page.getByTestId('alert-banner'), 0);
    await screenshot(page, '10-traces-sorted-by-status');
  });

  it('Resources: rows, sorting, search and the resources tree', async () => {
    const req = apiRequest(page, '/v1/agl/resources', (u) => u.searchParams.get('sort_by') === 'update_time' && u.searchParams.get('sort_order') === 'desc');
    await nav(page, 'Resources');
    await req;
    await waitForCount(page.getByTestId('resources-table-row'), 4);
    expect(new Set(await rowIds(page, 'resources-table'))).toEqual(new Set(data.resourcesIds));
    const sortReq = apiRequest(page, '/v1/agl/resources', (u) => u.searchParams.get('sort_by') === 'version' && u.searchParams.get('sort_order') === 'asc');
    await page.locator('thead th').getByRole('button', { name: /^Version/ }).click();
    await sortReq;
    await expect.poll(async () => (await rowIds(page, 'resources-table')).at(-1)).toBe('rs-e2e-002');
    await screenshot(page, '11-resources');
    const searchReq = apiRequest(page, '/v1/agl/resources', (u) => u.searchParams.get('resources_id_contains') === 'e2e-003');
    await page.getByPlaceholder('Search by Resources ID').fill('e2e-003');
    await searchReq;
    await waitForCount(page.getByTestId('resources-table-row'), 1);
    await page.locator('[data-row-id="rs-e2e-003"] [data-column="version"]').click();
    await expect.poll(() => page.getByTestId('resources-tree').innerText()).toContain('judge (Object)');
    await page.getByTestId('resources-tree').getByRole('button', { name: /judge/ }).click();
    await expect.poll(() => page.getByTestId('resources-tree').innerText()).toContain('model: "judge-model"');
    await screenshot(page, '12-resources-tree');
    await page.getByPlaceholder('Search by Resources ID').fill('');
  });

  it('Runners: rows, states, search, sort and the runner detail drawer', async () => {
    const req = apiRequest(page, '/v1/agl/workers', (u) => u.searchParams.get('sort_by') === 'last_heartbeat_time');
    await nav(page, 'Runners');
    await req;
    await waitForCount(page.getByTestId('runners-table-row'), 6);
    const busy = page.locator('[data-row-id="Worker-3"]');
    await waitForCount(busy.locator('[data-status="busy"]'), 1);
    await expect.poll(() => busy.locator('[data-column="currentRolloutId"]').innerText()).toBe(id('echo'));
    // Issue 29: a runner that exited says so; one whose heartbeats stopped (3 intervals) is offline, not "Idle".
    const state = (w: string) => page.locator(`[data-row-id="${w}"] [data-column="status"] .badge`);
    await expect.poll(() => state('Worker-4').getAttribute('data-status')).toBe('stopped');
    expect(await state('Worker-4').innerText()).toBe('Stopped');
    expect(await state('Worker-4').getAttribute('title')).toContain('exited cleanly');
    await expect.poll(() => state('Worker-5').getAttribute('data-status')).toBe('offline');
    expect(await state('Worker-5').innerText()).toBe('Offline');
    expect(await state('Worker-5').getAttribute('title')).toMatch(/^No heartbeat for \d+ s \(expected every 0.5 s\)/);
    expect(await state('Worker-0').getAttribute('data-status')).toBe('idle');
    const sortReq = apiRequest(page, '/v1/agl/workers', (u) => u.searchParams.get('sort_by') === 'worker_id' && u.searchParams.get('sort_order') === 'asc');
    await page.locator('thead th').getByRole('button', { name: /^Runner ID/ }).click();
    await sortReq;
    await expect.poll(() => rowIds(page, 'runners-table')).toEqual(data.workerIds);
    await screenshot(page, '13-runners');
    await screenshot(page, '31-runners-stopped-offline', false);
    const searchReq = apiRequest(page, '/v1/agl/workers', (u) => u.searchParams.get('worker_id_contains') === 'Worker-2');
    await page.getByPlaceholder('Search by Runner ID').fill('Worker-2');
    await searchReq;
    await waitForCount(page.getByTestId('runners-table-row'), 1);
    await page.getByRole('button', { name: 'Show runner detail' }).click();
    await expect.poll(() => page.getByTestId('drawer').getAttribute('data-drawer-type')).toBe('worker-detail');
    await expect.poll(() => page.getByTestId('drawer-json').innerText()).toContain('gpu_utilization');
    await screenshot(page, '14-runner-detail-drawer');
    // The drawer is docked beside the page on wide screens: Escape (or its close button) closes it.
    await page.keyboard.press('Escape');
    await waitForCount(page.getByTestId('drawer'), 0);
    await page.getByPlaceholder('Search by Runner ID').fill('');
  });

  it('Settings: theme, and a dead base URL turns the indicator Offline and raises the error alert', async () => {
    await nav(page, 'Settings');
    await page.getByTestId('settings-page').waitFor();
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Online');
    await screenshot(page, '15-settings');
    await page.getByTestId('settings-theme').selectOption('dark');
    await expect.poll(() => page.locator('html').getAttribute('data-theme')).toBe('dark');
    await nav(page, 'Rollouts');
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
    await screenshot(page, '16-rollouts-dark');
    await nav(page, 'Settings');
    await page.getByTestId('settings-theme').selectOption('light');

    // Issue 29: a wrong backend URL gets an error page naming the URL that failed, why, and where to fix it.
    const dead = 'http://127.0.0.1:9';
    await page.getByTestId('settings-base-url').fill(dead);
    await page.getByTestId('settings-base-url-save').click();
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Offline');
    await nav(page, 'Rollouts');
    await expect.poll(() => page.getByTestId('alert-banner').innerText()).toContain('Unable to refresh rollouts');
    const tableError = page.getByTestId('rollouts-table-empty').getByTestId('error-state');
    await expect.poll(() => tableError.getAttribute('data-kind')).toBe('network');
    expect(await tableError.getByTestId('error-title').innerText()).toBe(`Cannot reach the store at ${dead}`);
    expect(await tableError.getByTestId('error-reason').innerText()).toBe(`GET ${dead}/v1/agl/rollouts failed: no answer (Failed to fetch).`);
    const fix = await tableError.getByTestId('error-fix').innerText();
    expect(fix).toContain('Settings → Backend base URL');
    expect(fix).toContain(`--cors-origin ${store.url}`);
    expect(await page.getByTestId('rollouts-table-empty').innerText()).not.toContain('adjust the filters');
    // The summary says the same.
    await expect.poll(() => page.getByTestId('rollout-summary').getByTestId('error-state').getAttribute('data-kind')).toBe('network');
    await screenshot(page, '17-offline-alert');
    await page.getByTestId('alert-banner').getByRole('button', { name: 'Close alert' }).click();
    await screenshot(page, '32-error-unreachable-store', false);

    // A server that answers, but has no store API at that address: HTTP 404, named as such.
    await page.getByTestId('rollouts-table-empty').getByRole('button', { name: 'Open Settings' }).click();
    await page.waitForURL('**/settings');
    const wrong = `${store.url}/wrong`;
    await page.getByTestId('settings-base-url').fill(wrong);
    await page.getByTestId('settings-base-url').press('Enter');
    await nav(page, 'Rollouts');
    await expect.poll(() => tableError.getAttribute('data-kind')).toBe('not-found');
    expect(await tableError.getByTestId('error-title').innerText()).toBe(`No rollouthub store API at ${wrong}`);
    expect(await tableError.getByTestId('error-reason').innerText()).toBe(`GET ${wrong}/v1/agl/rollouts answered HTTP 404 (Not Found).`);
    await page.getByTestId('alert-banner').getByRole('button', { name: 'Close alert' }).click();
    await screenshot(page, '33-error-not-a-store', false);

    // The address the store prints (with /v1/agl) works as a base URL too.
    await nav(page, 'Settings');
    await page.getByTestId('settings-base-url').fill(`${store.url}/v1/agl`);
    await page.getByTestId('settings-base-url-save').click();
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Online');
    await nav(page, 'Rollouts');
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
    await nav(page, 'Settings');
    await page.getByTestId('settings-base-url').fill(store.url);
    await page.getByTestId('settings-base-url').blur();
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Online');
    await nav(page, 'Rollouts');
    await waitForCount(page.getByTestId('alert-banner'), 0);
  });

  it('Traces: opening /traces without a query selects the newest rollout and its latest attempt', async () => {
    await page.goto(`${store.url}/traces`);
    // The newest rollout (hotel) has no attempt: only the rollout is written to the URL.
    await page.waitForURL(`**/traces?rolloutId=${id('hotel')}`);
    await expect.poll(() => page.getByRole('combobox', { name: 'Select rollout' }).inputValue()).toBe(id('hotel'));
    await expect.poll(() => page.getByTestId('traces-table-empty').innerText()).toContain('No traces found');
    // A rollout with attempts: its latest attempt is selected and written to the URL.
    const delta = data.rollouts.delta;
    await page.goto(`${store.url}/traces?rolloutId=${delta.rolloutId}`);
    await page.waitForURL(`**/traces?rolloutId=${delta.rolloutId}&attemptId=${delta.attemptIds[1]}`);
    await waitForCount(page.getByTestId('traces-table-row'), 5);
    const options = await page.getByLabel('Select attempt').locator('option').allInnerTexts();
    expect(options.slice(1)).toEqual([`Attempt 2 (${delta.attemptIds[1]}) - Succeeded`, `Attempt 1 (${delta.attemptIds[0]}) - Failed`]);
  });

  it('Live: the summary and the waterfall update without a reload', async () => {
    await page.goto(`${store.url}/rollouts`);
    await expect.poll(() => page.getByTestId('count-total').locator('.count-value').innerText()).toBe('9');
    await enqueue(rest, 'kilo', 'train', null);
    await expect.poll(() => page.getByTestId('count-total').locator('.count-value').innerText(), { timeout: 15_000 }).toBe('10');
    await expect.poll(() => page.getByTestId('count-queuing').locator('.count-value').innerText()).toBe('3');

    const echo = data.rollouts.echo;
    await page.goto(`${store.url}/traces?rolloutId=${echo.rolloutId}&attemptId=${echo.attemptIds[0]}`);
    await waitForCount(page.getByTestId('traces-table-row'), 2);
    await page.getByRole('button', { name: 'Waterfall View' }).click();
    await waitForCount(page.getByTestId('waterfall-row'), 2);
    await addSpans(rest, echo.rolloutId, echo.attemptIds[0], Date.now() / 1000 - 2, agentSpans(null).slice(2, 3).map((s) => ({ ...s, parent: undefined })));
    await waitForCount(page.getByTestId('waterfall-row'), 3, 15_000);
    await screenshot(page, '18-waterfall-live');
  });
});

describe('auth token (store started with --api-token)', () => {
  const TOKEN = 'e2e-s3cret';
  let store: StoreProcess;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    store = await startStore(['--api-token', TOKEN]);
    await seed(new Rest(store.url, TOKEN));
    context = await browser().newContext({ viewport: VIEWPORT });
    page = await context.newPage();
  });
  afterAll(async () => {
    await context?.close();
    await store?.stop();
  });

  it('fails without a token, works after entering it in Settings, and keeps it across reloads', async () => {
    const requests = recordApiRequests(page);
    await page.goto(`${store.url}/rollouts`);
    // Issue 18: not "Online" and "adjust the filters", but a clear unauthorized state pointing at Settings.
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Unauthorized');
    expect(await page.getByTestId('connection-unauthorized').innerText()).toContain('Settings → API token');
    await expect.poll(() => page.getByTestId('rollouts-table-empty').getByTestId('unauthorized-state').innerText()).toBe('Unauthorized — set the API token in Settings.');
    expect(await page.getByTestId('rollout-summary').getByTestId('error-state').getAttribute('data-kind')).toBe('unauthorized');
    expect(await page.getByTestId('rollouts-table-empty').innerText()).toContain('Missing bearer token');
    expect(await page.getByTestId('rollouts-table-empty').innerText()).not.toContain('adjust the filters');
    await expect.poll(() => page.getByTestId('alert-banner').innerText()).toContain('Unauthorized — the store requires an API token');
    await screenshot(page, '19-auth-missing-token');

    await page.getByTestId('rollouts-table-empty').getByRole('button', { name: 'Open Settings', exact: true }).click();
    await page.waitForURL('**/settings');
    await page.getByTestId('settings-api-token').fill('wrong');
    await page.getByTestId('settings-api-token').blur();
    await nav(page, 'Rollouts');
    await expect.poll(() => page.getByTestId('rollouts-table-empty').innerText()).toContain('Invalid bearer token');
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Unauthorized');
    expect(await page.getByTestId('rollouts-table-empty').getByTestId('error-reason').innerText()).toBe(`GET ${store.url}/v1/agl/rollouts answered HTTP 401 (Invalid bearer token).`);

    // Issue 29: a Save button; the field says whether what it shows is saved.
    await nav(page, 'Settings');
    const save = page.getByTestId('settings-api-token-save');
    expect(await save.isDisabled()).toBe(true); // nothing to save
    await page.getByTestId('settings-api-token').fill(TOKEN);
    expect(await save.isEnabled()).toBe(true);
    expect(await page.getByTestId('settings-api-token-status').innerText()).toContain('Not saved yet');
    expect(await page.evaluate(() => window.localStorage.getItem('rollouthub.dashboard.apiToken'))).toBe('wrong');
    await save.click();
    await expect.poll(() => page.getByTestId('settings-api-token-status').innerText()).toBe('Saved: sent with every request from now on.');
    expect(await save.isDisabled()).toBe(true);
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Online');
    await screenshot(page, '20-settings-token');
    await screenshot(page, '34-settings-token-saved', false);
    expect(await page.evaluate(() => window.localStorage.getItem('rollouthub.dashboard.apiToken'))).toBe(TOKEN);
    requests.clear();
    await nav(page, 'Rollouts');
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
    await waitForCount(page.getByTestId('alert-banner'), 0);
    await expect.poll(() => page.getByTestId('connection-status').innerText()).toBe('Online');
    const i = requests.urls.findIndex((u) => u.pathname === '/v1/agl/rollouts');
    expect(requests.headers[i].authorization).toBe(`Bearer ${TOKEN}`);
    await screenshot(page, '21-rollouts-with-token');

    await page.reload();
    await waitForCount(page.getByTestId('rollouts-table-row'), 9);
    await nav(page, 'Runners');
    await waitForCount(page.getByTestId('runners-table-row'), 6);
  });
});
