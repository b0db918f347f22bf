import { resolve } from 'node:path';
import { defineConfig } from 'vite';

// The production bundle goes into the Python package so that `pip install` users get it without Node.
// Output is deterministic: content-hashed file names, no timestamps, no source maps. `public/` (the favicon) is copied
// as it is to the bundle's root, where the store serves it (`/favicon.ico`, `/favicon.svg`).
export default defineConfig({
  base: '/',
  publicDir: resolve(import.meta.dirname, 'public'),
  oxc: { jsx: { runtime: 'automatic' } },
  build: {
    outDir: resolve(import.meta.dirname, '../rollouthub/dashboard'),
    emptyOutDir: true,
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 1024,
    rollupOptions: {
      output: {
        entryFileNames: 'assets/[name]-[hash].js',
        chunkFileNames: 'assets/[name]-[hash].js',
        assetFileNames: 'assets/[name]-[hash][extname]',
      },
    },
  },
  // `ROLLOUTHUB_STORE_URL=http://127.0.0.1:4747 npm run dev` proxies the API to a running store (no CORS needed).
  server: {
    port: 5173,
    proxy: process.env.ROLLOUTHUB_STORE_URL
      ? { '/v1': { target: process.env.ROLLOUTHUB_STORE_URL, changeOrigin: true }, '/openapi.json': process.env.ROLLOUTHUB_STORE_URL }
      : undefined,
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
} as any);
