// End-to-end: the learning curve of a store holding two training runs (an APO run, then a GRPO-style run with held-out
// `val` evaluations per policy version): the run selector, short and thinned x labels, the tooltip with the full
// resources id, whiskers clipped to the rewards, the all-runs view, and the chart staying in view beside a drawer.
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { elementScreenshot, screenshot } from './browser';
import { VIEWPORT, sharedBrowser, waitForCount } from './helpers';
import { Rest, seedRewards, type RewardedRollout } from './seed';
import { startStore, type StoreProcess } from './server';

const APO = 'apo-42a386';
const GRPO = 'grpo-5d2e7a';
const GRPO_VERSIONS = 40;

// APO: 4 prompt versions, 0/1 rewards climbing to 1.0 (v2 train: mean 0.75, std 0.433: an unclipped whisker would
// reach 1.18). GRPO, started later: 40 policy versions from 0.25 up, 2 train rollouts and 1 val evaluation each.
const APO_TRAIN = [[0, 0, 0, 1], [0, 1, 0, 1], [1, 1, 0, 1], [1, 1, 1, 1]];
const APO_VAL = [[0, 0], [1, 0], [1, 1], [1, 1]];
const clamp01 = (x: number) => Math.round(Math.min(1, Math.max(0, x)) * 1000) / 1000;
const grpoMean = (k: number) => 0.25 + 0.6 * (1 - Math.exp(-k / 10));

function runs(): { versions: string[]; rollouts: RewardedRollout[] } {
  const versions: string[] = [];
  const rollouts: RewardedRollout[] = [];
  APO_TRAIN.forEach((train, k) => {
    const resourcesId = `${APO}-v${k}`;
    versions.push(resourcesId);
    for (const reward of train) rollouts.push({ resourcesId, mode: 'train', reward });
    for (const reward of APO_VAL[k]) rollouts.push({ resourcesId, mode: 'val', reward });
  });
  for (let k = 0; k < GRPO_VERSIONS; k++) {
    const resourcesId = `${GRPO}-v${k}`;
    versions.push(resourcesId);
    rollouts.push({ resourcesId, mode: 'train', reward: clamp01(grpoMean(k) + 0.1 + 0.05 * Math.sin(k * 1.7)) });
    rollouts.push({ resourcesId, mode: 'train', reward: clamp01(grpoMean(k) - 0.1 + 0.05 * Math.cos(k)) });
    rollouts.push({ resourcesId, mode: 'val', reward: clamp01(grpoMean(k) - 0.04) });
  }
  return { versions, rollouts };
}

/** Whether the chart's canvas has pixels of `rgb` (opaque) in the rectangle (CSS pixels relative to the canvas). */
async function canvasHasColor(page: Page, rgb: [number, number, number], rect: { x: number; y: number; w: number; h: number }): Promise<boolean> {
  return page.getByTestId('learning-curve-chart').locator('canvas').evaluate((canvas: HTMLCanvasElement, [rgb, rect]) => {
    const scale = canvas.width / canvas.getBoundingClientRect().width;
    const x = Math.max(0, Math.round(rect.x * scale));
    const y = Math.max(0, Math.round(rect.y * scale));
    const w = Math.max(1, Math.round(rect.w * scale));
    const h = Math.max(1, Math.round(rect.h * scale));
    const data = canvas.getContext('2d')!.getImageData(x, y, w, h).data;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - rgb[0]) < 40 && Math.abs(data[i + 1] - rgb[1]) < 40 && Math.abs(data[i + 2] - rgb[2]) < 40) return true;
    }
    return false;
  }, [rgb, rect] as const);
}

/** The plot area (uPlot's `.u-over`) relative to the canvas, in CSS pixels, and the x of version index `i`. */
async function plotArea(page: Page, versions: number): Promise<{ left: number; top: number; width: number; height: number; xOf: (i: number) => number }> {
  const chart = page.getByTestId('learning-curve-chart');
  const canvas = (await chart.locator('canvas').boundingBox())!;
  const over = (await chart.locator('.u-over').boundingBox())!;
  const area = { left: over.x - canvas.x, top: over.y - canvas.y, width: over.width, height: over.height };
  return { ...area, xOf: (i: number) => area.left + (area.width * (i + 0.5)) / versions };
}

const TRAIN_BLUE: [number, number, number] = [37, 99, 235];
const VAL_TEAL: [number, number, number] = [13, 148, 136];

const browser = sharedBrowser();

describe('learning curve of two runs in one store', () => {
  let store: StoreProcess;
  let context: BrowserContext;
  let page: Page;
  const summary = () => page.getByTestId('rollout-summary');
  const chart = () => page.getByTestId('learning-curve-chart');
  const tableRows = async () =>
    page.getByTestId('learning-curve-row').evaluateAll((els) =>
      els.map((e) => [e.getAttribute('data-resources-id'), e.getAttribute('data-mode'), e.querySelector('[data-column="mean"]')!.textContent]),
    );

  beforeAll(async () => {
    store = await startStore();
    const { versions, rollouts } = runs();
    await seedRewards(new Rest(store.url), versions, rollouts);
    context = await browser().newContext({ viewport: VIEWPORT });
    page = await context.newPage();
    page.on('pageerror', (e) => console.error('pageerror:', e.message));
  });
  afterAll(async () => {
    await context?.close();
    await store?.stop();
  });

  it('shows the latest run by default, with short version labels thinned to fit', async () => {
    await page.goto(`${store.url}/rollouts`);
    await expect.poll(() => chart().getAttribute('data-versions')).toBe(String(GRPO_VERSIONS));
    expect(await page.getByTestId('run-selector').inputValue()).toBe(GRPO);
    const options = await page.getByTestId('run-selector').locator('option').allInnerTexts();
    expect(options).toEqual([`${GRPO} · 40 versions, 120 rollouts`, `${APO} · 4 versions, 24 rollouts`, 'All runs (2) on one axis']);
    expect(new URL(page.url()).searchParams.get('run')).toBeNull();
    // `v0`…`v39`, not `grpo-5d2e7a-v0…` smeared over each other: every other one at this width, the latest always.
    await expect.poll(() => chart().getAttribute('data-x-labels')).toMatch(/ v39$/);
    const labels = (await chart().getAttribute('data-x-labels'))!.split(' ');
    expect(labels.every((l) => /^v\d+$/.test(l))).toBe(true);
    expect(labels.length).toBeLessThan(GRPO_VERSIONS);
    expect(labels.length).toBeGreaterThanOrEqual(GRPO_VERSIONS / 3);
    expect(await chart().getAttribute('data-x-rotate')).toBe('0');
    // Only this run's versions, with train and val (held-out evaluation) lines.
    await summary().getByTestId('learning-curve-details').locator('summary').click();
    const rows = await tableRows();
    expect(rows).toHaveLength(2 * GRPO_VERSIONS);
    expect(rows.every(([id]) => id!.startsWith(`${GRPO}-v`))).toBe(true);
    expect(new Set(rows.map(([, mode]) => mode))).toEqual(new Set(['train', 'val']));
    await summary().getByTestId('learning-curve-details').locator('summary').click();
    const legend = await summary().locator('.u-legend').innerText();
    expect(legend).toContain('train');
    expect(legend).toContain('val');
    await elementScreenshot(summary(), '26-learning-curve-two-runs-latest');
  });

  it('picking a run shows that run alone (in the URL, kept across a reload)', async () => {
    await page.getByTestId('run-selector').selectOption(APO);
    await expect.poll(() => new URL(page.url()).searchParams.get('run')).toBe(APO);
    await expect.poll(() => chart().getAttribute('data-versions')).toBe('4');
    await expect.poll(() => chart().getAttribute('data-x-labels')).toBe('v0 v1 v2 v3');
    await summary().getByTestId('learning-curve-details').locator('summary').click();
    expect(await tableRows()).toEqual([
      [`${APO}-v0`, 'train', '0.250'], [`${APO}-v0`, 'val', '0.000'],
      [`${APO}-v1`, 'train', '0.500'], [`${APO}-v1`, 'val', '0.500'],
      [`${APO}-v2`, 'train', '0.750'], [`${APO}-v2`, 'val', '1.000'],
      [`${APO}-v3`, 'train', '1.000'], [`${APO}-v3`, 'val', '1.000'],
    ]);
    await elementScreenshot(summary(), '27-learning-curve-two-runs-picked');
    await summary().getByTestId('learning-curve-details').locator('summary').click();

    await page.reload();
    await expect.poll(() => chart().getAttribute('data-versions')).toBe('4');
    expect(await page.getByTestId('run-selector').inputValue()).toBe(APO);
  });

  it('whiskers stay within the rewards (no ±1 std above 1.0); hovering names the full resources id', async () => {
    await waitForCount(chart().locator('canvas'), 1);
    expect(await chart().getAttribute('data-y-range')).toBe('0,1');
    const area = await plotArea(page, 4);
    // v2 train: mean 0.75, std 0.433. Its whisker ends at the plot's top (reward 1.0), not 0.18 above it.
    const column = { x: area.xOf(2) - 6, w: 12 };
    await expect.poll(() => canvasHasColor(page, TRAIN_BLUE, { ...column, y: area.top + 2, h: area.height * 0.2 })).toBe(true);
    expect(await canvasHasColor(page, TRAIN_BLUE, { ...column, y: 0, h: area.top - 1 })).toBe(false);

    const box = (await chart().locator('.u-over').boundingBox())!;
    await page.mouse.move(box.x + area.xOf(2) - area.left, box.y + box.height / 2);
    const tip = page.getByTestId('learning-curve-tooltip');
    await expect.poll(() => tip.isVisible()).toBe(true);
    const text = await tip.innerText();
    expect(text).toContain(`${APO}-v2`);
    expect(text).toContain('train: 0.750 ± 0.433 (n=4, 0.00–1.00)');
    expect(text).toContain('val: 1.000 ± 0.000 (n=2, 1.00–1.00)');
    await elementScreenshot(summary(), '28-learning-curve-tooltip-clipped-whiskers');
    await page.mouse.move(5, 5);
    await expect.poll(() => tip.isVisible()).toBe(false);
  });

  it('"All runs" puts both on one axis in bands, without joining the first run\'s last point to the second\'s first', async () => {
    await page.getByTestId('run-selector').selectOption('all');
    await expect.poll(() => new URL(page.url()).searchParams.get('run')).toBe('all');
    const total = 4 + GRPO_VERSIONS;
    await expect.poll(() => chart().getAttribute('data-versions')).toBe(String(total));
    await expect.poll(() => chart().getAttribute('data-x-labels')).toMatch(/ v39$/);
    const area = await plotArea(page, total);
    // Between APO v3 (1.0) and GRPO v0 (~0.3): no line of either mode crosses the boundary.
    const between = { x: (area.xOf(3) + area.xOf(4)) / 2 - 2, w: 4, y: area.top, h: area.height };
    expect(await canvasHasColor(page, TRAIN_BLUE, between)).toBe(false);
    expect(await canvasHasColor(page, VAL_TEAL, between)).toBe(false);
    // Inside a run the line is drawn (the same test finds it between GRPO v0 and v1).
    expect(await canvasHasColor(page, TRAIN_BLUE, { ...between, x: (area.xOf(4) + area.xOf(5)) / 2 - 2 })).toBe(true);
    await elementScreenshot(summary(), '29-learning-curve-all-runs');
  });

  it('the chart stays in view while a drawer is open', async () => {
    await page.getByTestId('run-selector').selectOption(APO);
    await expect.poll(() => chart().getAttribute('data-versions')).toBe('4');
    const firstRow = page.getByTestId('rollouts-table-row').first();
    await firstRow.getByRole('button', { name: 'View conversation' }).click();
    const drawer = page.getByTestId('drawer');
    await expect.poll(() => drawer.getAttribute('data-drawer-type')).toBe('rollout-conversation');
    await expect.poll(() => page.getByTestId('conversation-reward').isVisible()).toBe(true);
    // The page narrows beside the drawer: the chart is resized into the space left, not covered.
    await expect.poll(async () => {
      const c = (await chart().boundingBox())!;
      const d = (await drawer.boundingBox())!;
      return c.x + c.width <= d.x && c.width > 300;
    }).toBe(true);
    const c = (await chart().boundingBox())!;
    const hit = await page.evaluate(([x, y]) => !!document.elementFromPoint(x, y)?.closest('[data-testid="learning-curve-chart"]'), [c.x + c.width / 2, c.y + c.height / 2]);
    expect(hit).toBe(true);
    const area = await plotArea(page, 4);
    await expect.poll(() => canvasHasColor(page, TRAIN_BLUE, { x: area.left, y: area.top, w: area.width, h: area.height })).toBe(true);
    await screenshot(page, '30-drawer-open-chart-stays', false);
    await page.keyboard.press('Escape');
    await waitForCount(drawer, 0);
  });
});
