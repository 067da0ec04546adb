// Shared helpers for the browser tests: Debian's Chromium through playwright-core, a fresh
// profile per context, and where screenshots go. `cargo xtask test` sets PORTAL_URL and
// ARTIFACTS_DIR and starts the portal (release build) against a throwaway database.
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const BASE = process.env.PORTAL_URL ?? 'http://127.0.0.1:3000';
export const ARTIFACTS = process.env.ARTIFACTS_DIR ?? 'test-artifacts';
mkdirSync(ARTIFACTS, { recursive: true });

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A browser context with its own empty profile; close() also removes the profile. */
export async function openBrowser({ javaScriptEnabled = true, viewport } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'portal-e2e-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: FLAGS,
    javaScriptEnabled,
    viewport: viewport ?? { width: 1280, height: 800 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  return {
    context,
    page,
    errors,
    /** Closes the browser; fails the test if any page threw (a wasm panic during
     *  hydration included), since a form's no-JS fallback could otherwise hide it. */
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
      if (errors.length) {
        throw new Error(`uncaught errors in the page:\n${errors.join('\n')}`);
      }
    },
  };
}

export function shot(page, name) {
  return page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Resolves once the wasm bundle has hydrated the page. */
export function hydrated(page) {
  return page.waitForSelector('body[data-hydrated="true"]', { timeout: 20_000 });
}
