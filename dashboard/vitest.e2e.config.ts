import { defineConfig } from 'vitest/config';

// End-to-end tests: a real `rollouthub store` process + headless Chromium (Debian's package) via playwright-core.
export default defineConfig({
  test: {
    include: ['e2e/**/*.e2e.test.ts'],
    environment: 'node',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    sequence: { concurrent: false },
  },
});
