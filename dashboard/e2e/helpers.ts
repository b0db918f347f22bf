// Small waiting and navigation helpers shared by the end-to-end tests (conditions with timeouts, never sleeps).
import type { Browser, Locator, Page, Request } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import { launchBrowser, prepareScreenshotDir } from './browser';

// Wide enough for every rollout column (the tables hide low-priority columns on narrow screens).
export const VIEWPORT = { width: 2048, height: 1152 };

export async function waitForCount(locator: Locator, n: number, timeout = 15_000): Promise<void> {
  await expect.poll(() => locator.count(), { timeout }).toBe(n);
}

/** The next request to the API path `path` matching `pred` (awaited by the caller). */
export function apiRequest(page: Page, path: string, pred: (u: URL) => boolean = () => true): Promise<Request> {
  const p = page.waitForRequest((r) => {
    const u = new URL(r.url());
    return u.pathname === path && pred(u);
  }, { timeout: 15_000 });
  p.catch(() => undefined); // awaited by the caller; avoid unhandled rejections when an earlier step fails
  return p;
}

export async function rowIds(page: Page, testId: string): Promise<string[]> {
  return page.locator(`[data-testid="${testId}-row"]`).evaluateAll((els) => els.map((e) => e.getAttribute('data-row-id') ?? ''));
}

export async function nav(page: Page, label: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Main navigation' }).getByRole('link', { name: label, exact: true }).click();
}

/** Chromium for the test file: launched before its tests, closed after them. Returns the browser's getter. */
export function sharedBrowser(): () => Browser {
  let launched: Awaited<ReturnType<typeof launchBrowser>> | undefined;
  beforeAll(async () => {
    prepareScreenshotDir();
    launched = await launchBrowser();
  });
  afterAll(async () => {
    await launched?.close();
  });
  return () => {
    if (!launched) throw new Error('the browser is not launched (sharedBrowser() must be called at the top level of a test file)');
    return launched.browser;
  };
}
