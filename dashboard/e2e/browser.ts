// Headless Chromium from the distribution (no browser download), driven by playwright-core.
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type Locator, type Page, type Request } from 'playwright-core';
import { REPO_ROOT } from './server';

export const SCREENSHOT_DIR = resolve(process.env.DASHBOARD_SCREENSHOT_DIR ?? join(REPO_ROOT, 'ci-artifacts', 'dashboard-screenshots'));

export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  for (const c of candidates) if (c && existsSync(c)) return c;
  throw new Error('Chromium not found: install Debian\'s `chromium` package or set CHROMIUM_PATH');
}

export async function launchBrowser(): Promise<{ browser: Browser; close: () => Promise<void> }> {
  // playwright-core gives every launch a fresh temporary profile (its own --user-data-dir).
  const browser = await chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage',
    ],
  });
  return {
    browser,
    close: async () => {
      await browser.close();
    },
  };
}

export function prepareScreenshotDir(): void {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
}

/** A PNG of the whole page (or of the viewport only, as a user sees it, with `fullPage: false`). */
export async function screenshot(page: Page, name: string, fullPage = true): Promise<string> {
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  await page.screenshot({ path, fullPage, animations: 'disabled' });
  return path;
}

/** A PNG of one element (e.g. the summary card with the learning curve). */
export async function elementScreenshot(locator: Locator, name: string): Promise<string> {
  const path = join(SCREENSHOT_DIR, `${name}.png`);
  await locator.screenshot({ path, animations: 'disabled' });
  return path;
}

/** Records the API requests a page makes (URL objects), for asserting query parameters. */
export function recordApiRequests(page: Page): { urls: URL[]; headers: Record<string, string>[]; clear: () => void; last: (path: string) => URL | undefined } {
  const urls: URL[] = [];
  const headers: Record<string, string>[] = [];
  page.on('request', (req: Request) => {
    const u = new URL(req.url());
    if (u.pathname.startsWith('/v1/agl/')) {
      urls.push(u);
      headers.push(req.headers());
    }
  });
  return {
    urls,
    headers,
    clear: () => {
      urls.length = 0;
      headers.length = 0;
    },
    last: (path: string) => [...urls].reverse().find((u) => u.pathname === path),
  };
}
