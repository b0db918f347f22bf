#!/usr/bin/env node
// Regenerates public/favicon.ico from public/favicon.svg (run after changing the SVG; both are committed and copied
// into the bundle by `npm run build`). Chromium (playwright-core, Debian's package) renders the SVG at 16, 32 and
// 48 px; the icon file holds the three PNGs (an ICO container: a 6-byte header, a 16-byte entry per image, then the
// images, every number little-endian).
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { chromium } from 'playwright-core';

const here = resolve(import.meta.dirname, '..');
const svg = readFileSync(resolve(here, 'public', 'favicon.svg'), 'utf8');
const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SIZES = [16, 32, 48];

const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
const pngs = [];
try {
  for (const size of SIZES) {
    const page = await browser.newPage({ viewport: { width: size, height: size } });
    const src = `data:image/svg+xml;base64,${Buffer.from(svg).toString('base64')}`;
    await page.setContent(`<style>html,body{margin:0;background:transparent}</style><img src="${src}" width="${size}" height="${size}">`);
    await page.locator('img').evaluate((img) => img.decode());
    pngs.push(await page.screenshot({ omitBackground: true, clip: { x: 0, y: 0, width: size, height: size } }));
    await page.close();
  }
} finally {
  await browser.close();
}

const header = Buffer.alloc(6);
header.writeUInt16LE(0, 0); // reserved
header.writeUInt16LE(1, 2); // type: icon
header.writeUInt16LE(pngs.length, 4);
let offset = 6 + 16 * pngs.length;
const entries = pngs.map((png, i) => {
  const e = Buffer.alloc(16);
  e.writeUInt8(SIZES[i] % 256, 0); // width (0 means 256)
  e.writeUInt8(SIZES[i] % 256, 1); // height
  e.writeUInt8(0, 2); // palette size
  e.writeUInt8(0, 3); // reserved
  e.writeUInt16LE(1, 4); // colour planes
  e.writeUInt16LE(32, 6); // bits per pixel
  e.writeUInt32LE(png.length, 8);
  e.writeUInt32LE(offset, 12);
  offset += png.length;
  return e;
});
const out = resolve(here, 'public', 'favicon.ico');
writeFileSync(out, Buffer.concat([header, ...entries, ...pngs]));
console.log(`make-favicon: wrote ${out} (${SIZES.join(', ')} px)`);
