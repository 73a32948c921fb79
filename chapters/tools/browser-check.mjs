// Opens every page of the built book in headless Chromium and fails if a reader would see
// something broken: a KaTeX error element, an image that did not load, a console error or an
// uncaught exception, a request that failed, a link to a page or anchor that does not exist, or
// typeset math without KaTeX's fonts. Saves a screenshot per page (its first screen and the
// whole page), and close-ups of its first display formula, matrix, plot, table and code block.
//
// Run through chapters/tools/browser-check.sh, which builds the book, serves it on localhost and
// installs puppeteer-core (pinned in tools/browser/package.json; it downloads no browser).
//   node browser-check.mjs <book dir> <http base url> <screenshot dir>
// The browser is $CHROMIUM (default /usr/bin/chromium); `puppeteer-core` is resolved from
// $BROWSER_CHECK_MODULES (the node_modules folder the wrapper installed it into).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const [bookDir, base, shots] = process.argv.slice(2);
if (!bookDir || !base || !shots) {
  console.error("usage: browser-check.mjs <book dir> <http base url> <screenshot dir>");
  process.exit(2);
}
const modules = process.env.BROWSER_CHECK_MODULES;
const require = createRequire(path.join(path.resolve(modules || "."), "noop.js"));
const puppeteer = require("puppeteer-core");

const pages = fs
  .readdirSync(bookDir, { recursive: true })
  .filter((f) => f.endsWith(".html"))
  .map((f) => f.split(path.sep).join("/"))
  .sort();
fs.mkdirSync(shots, { recursive: true });

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    `--user-data-dir=${fs.mkdtempSync(path.join(os.tmpdir(), "book-check-"))}`,
  ],
});

const faults = [];
const ids = new Map(); // page -> Set of ids
const links = []; // [from page, absolute url]
const origin = new URL(base).origin;
let formulas = 0;
let images = 0;

for (const name of pages) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const fail = (what) => faults.push(`${name}: ${what}`);
  // The one request no page makes: a browser asks for /favicon.ico by itself when a page names
  // no icon (toc.html, the sidebar's fallback for readers without JavaScript, names none).
  const implicitIcon = (u) => u === `${origin}/favicon.ico`;
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    if (implicitIcon(msg.location()?.url ?? "")) return;
    fail(`console error: ${msg.text()} (${msg.location()?.url ?? "?"})`);
  });

  page.on("pageerror", (err) => fail(`uncaught exception: ${err.message}`));
  page.on("requestfailed", (req) => {
    // Only the book's own origin is ever asked for anything; anything else is a fault too.
    fail(`request failed: ${req.url()} (${req.failure()?.errorText})`);
  });
  page.on("response", (res) => {
    if (res.status() >= 400 && !implicitIcon(res.url())) {
      fail(`HTTP ${res.status()} for ${res.url()}`);
    }
  });
  page.on("request", (req) => {
    if (!req.url().startsWith(origin) && !req.url().startsWith("data:")) {
      fail(`asked another site: ${req.url()}`);
    }
  });
  const url = new URL(name, base).href;
  const res = await page.goto(url, { waitUntil: "load", timeout: 60000 });
  if (!res || !res.ok()) fail(`HTTP ${res ? res.status() : "no response"}`);
  await page.evaluate(() => document.fonts.ready);
  const seen = await page.evaluate(() => {
    const imgs = [...document.images];
    return {
      katexErrors: [...document.querySelectorAll(".katex-error")].map((e) =>
        (e.getAttribute("title") || e.textContent).slice(0, 120),
      ),
      katex: document.querySelectorAll(".katex").length,
      katexFont: document.fonts.check("16px KaTeX_Main"),
      katexFontLoaded: [...document.fonts].some(
        (f) => f.family.replace(/"/g, "") === "KaTeX_Main" && f.status === "loaded",
      ),
      images: imgs.length,
      broken: imgs.filter((i) => !i.complete || i.naturalWidth === 0).map((i) => i.src),
      ids: [...document.querySelectorAll("[id]")].map((e) => e.id),
      hrefs: [...document.querySelectorAll("a[href]")].map((a) => a.href),
    };
  });
  formulas += seen.katex;
  images += seen.images;
  for (const e of seen.katexErrors) fail(`KaTeX error element: ${e}`);
  for (const src of seen.broken) fail(`image not loaded: ${src}`);
  if (seen.katex > 0 && !seen.katexFontLoaded) fail("math typeset but KaTeX_Main font not loaded");
  ids.set(name, new Set(seen.ids));
  for (const h of seen.hrefs) if (h.startsWith(origin)) links.push([name, h]);

  const stem = name.replace(/\.html$/, "").replace(/\//g, "_");
  // The first screen as a reader sees it, then the whole page.
  await page.screenshot({ path: path.join(shots, `${stem}--top.png`) });
  await page.screenshot({ path: path.join(shots, `${stem}.png`), fullPage: name !== "print.html" });
  // Close-ups of the first of each: a display formula, a typeset matrix (a display formula
  // with an array between stretched brackets), a plot, a table, a printed block of numbers.
  const closeUps = {
    math: () => document.querySelector("main .katex-display"),
    matrix: () =>
      [...document.querySelectorAll("main .katex-display")].find(
        (d) => d.querySelector(".mtable") && d.querySelector(".delimsizing, .delimcenter"),
      ),
    plot: () => document.querySelector("main img"),
    table: () => document.querySelector("main table"),
    code: () => document.querySelector("main pre"),
  };
  for (const [what, find] of Object.entries(closeUps)) {
    const el = (await page.evaluateHandle(find)).asElement();
    if (!el) continue;
    await el.scrollIntoView();
    await el.screenshot({ path: path.join(shots, `${stem}--${what}.png`) });
  }
  await page.close();
}

// Every link inside the book leads to a page or file that exists, and to an anchor it has.
const checked = new Map();
for (const [from, href] of links) {
  const u = new URL(href);
  const rel = decodeURIComponent(u.pathname.replace(new URL(base).pathname, "")) || "index.html";
  const file = rel.endsWith("/") ? `${rel}index.html` : rel;
  if (!checked.has(file)) {
    const r = await fetch(new URL(file, base));
    checked.set(file, r.status);
  }
  if (checked.get(file) !== 200) {
    faults.push(`${from}: link to ${file}: HTTP ${checked.get(file)}`);
  } else if (u.hash && ids.has(file) && from !== "404.html") {
    // 404.html has `<base href="/">` so that it works at any depth: its heading's self-link
    // resolves to index.html, which lacks that anchor; mdBook's choice, not a reader's link.
    const anchor = decodeURIComponent(u.hash.slice(1));
    if (!ids.get(file).has(anchor)) faults.push(`${from}: link to ${file}${u.hash}: no such anchor`);
  }
}
await browser.close();

for (const f of faults) console.log(f);
console.log(
  `browser-check: ${pages.length} pages, ${formulas} formulas, ${images} images, ` +
    `${links.length} internal links (${checked.size} targets) checked in Chromium: ` +
    `${faults.length} faults; screenshots in ${shots}`,
);
process.exit(faults.length ? 1 : 0);
