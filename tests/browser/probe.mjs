// Loads an HTML report from disk (or a page from a loopback URL) in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) and runs the steps a test gives it, printing what it saw as one JSON document
// on stdout. The test (tests/it/report.rs) makes the assertions; this only reports.
//
// usage: node probe.mjs REPORT.html|http://127.0.0.1:PORT/PAGE STEPS.json
// steps: [{"do": "click"|"count"|"texts"|"select"|"check"|"fill"|"scroll"|"eval"|"screenshot"|
//          "waitFor", "sel": CSS, "value": …, "js": …, "path": …}, …]
// prints: {"results": [one per step], "console": [errors and warnings], "pageErrors": […],
//          "requests": [every URL fetched but the report itself], "paint": {...},
//          "error": the step that failed, if one did}
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [report, stepsFile] = process.argv.slice(2);
const steps = JSON.parse(readFileSync(stepsFile, "utf8"));
// A page on disk, or one a test serves on loopback (`http://127.0.0.1:…`).
const url = /^https?:\/\//.test(report) ? report : pathToFileURL(report).href;

// The flags keep Chromium off the network it cannot reach here (and a fresh profile is
// playwright's default: a new user-data-dir per launch).
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = { results: [], console: [], pageErrors: [], requests: [], paint: {} };
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") out.console.push(m.type() + ": " + m.text());
  });
  page.on("pageerror", (e) => out.pageErrors.push(String(e)));
  page.on("request", (r) => { if (r.url() !== url) out.requests.push(r.url()); });
  const started = Date.now();
  await page.goto(url, { waitUntil: "load", timeout: 120000 });
  await page.waitForSelector("body[data-ready='1']", { timeout: 120000 });
  out.paint = await page.evaluate(() => {
    const p = {};
    for (const e of performance.getEntriesByType("paint")) p[e.name] = e.startTime;
    p.readyMs = window.mcptapeReport && window.mcptapeReport.renderMs;
    p.items = window.mcptapeReport && window.mcptapeReport.items;
    return p;
  });
  out.paint.loadWallMs = Date.now() - started;
  for (const s of steps) {
    let r = null;
    switch (s.do) {
      case "click": await page.click(s.sel); break;
      case "count": r = await page.locator(s.sel).count(); break;
      case "texts": r = await page.locator(s.sel).allTextContents(); break;
      case "select": await page.selectOption(s.sel, s.value); break;
      case "check": await page.check(s.sel); break;
      case "uncheck": await page.uncheck(s.sel); break;
      case "fill": await page.fill(s.sel, s.value); await page.press(s.sel, "Enter"); break;
      case "scroll":
        await page.evaluate(([sel, top]) => {
          const e = document.querySelector(sel);
          e.scrollTop = top;
          e.dispatchEvent(new Event("scroll"));
        }, [s.sel, s.value]);
        await page.evaluate(() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok))));
        break;
      case "eval": r = await page.evaluate(s.js); break;
      case "waitFor": await page.waitForSelector(s.sel, { timeout: 30000 }); break;
      case "screenshot": await page.screenshot({ path: s.path, fullPage: !!s.value }); r = s.path; break;
      default: throw new Error("unknown step " + JSON.stringify(s));
    }
    out.results.push(r);
  }
} catch (e) {
  // Reported, not thrown: the test shows it with everything else that was seen.
  out.error = String(e && e.message ? e.message : e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
