// Drive the Dagster UI with headless Chromium (Debian's /usr/bin/chromium) through
// playwright-core: open a pipeline's asset graph, launch "Materialize all", wait for the
// run to finish, save screenshots. Prints one JSON line: {"runId", "status", "screenshots"}.
//   node dagster_ui.mjs <base-url> <asset-group> <out-dir> <timeout-seconds> [<stage asset>]
// With a stage asset name it then opens that asset, the cost report (its inline plot) and the
// cost report's checks tab, and reports what it saw under "seen".
//   node dagster_ui.mjs <base-url> --shot <out-dir> <name> <url-path> <text to wait for>
// only opens one page, saves <name>.png and prints {"screenshot", "text"} (the page's text).
// PLAYWRIGHT_CORE_DIR: folder holding node_modules/playwright-core.
import { createRequire } from 'module';
import path from 'path';

const require = createRequire(path.join(process.env.PLAYWRIGHT_CORE_DIR, 'node_modules') + '/');
const { chromium } = require('playwright-core');
const [base, group, outDir, timeoutArg, stageAsset] = process.argv.slice(2);
const timeoutMs = Number(timeoutArg || 480) * 1000;
const log = (m) => process.stderr.write(`[ui] ${m}\n`);

async function graphql(query) {
  const r = await fetch(`${base}/graphql`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ query }),
  });
  return (await r.json()).data;
}

async function runs() {
  const d = await graphql('{ runsOrError { ... on Runs { results { runId status jobName } } } }');
  return d.runsOrError.results || [];
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const shots = [];
if (group === '--shot') {
  const [, , shotDir, name, urlPath, waitText] = process.argv.slice(2);
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(`${base}${urlPath}`, { waitUntil: 'domcontentloaded' });
    await page.getByText(waitText, { exact: false }).first().waitFor({ timeout: 60000 }).catch(() => {});
    await page.waitForTimeout(2500);
    const shot = path.join(shotDir, `${name}.png`);
    await page.screenshot({ path: shot });
    const text = await page.locator('body').innerText();
    process.stdout.write(JSON.stringify({ screenshot: shot, text }) + '\n');
  } finally {
    await browser.close();
  }
  process.exit(0);
}
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const groupUrl = `${base}/locations/pipelines.definitions/asset-groups/${group}`;
  const before = new Set((await runs()).map((r) => r.runId));
  log(`opening ${groupUrl}`);
  await page.goto(groupUrl, { waitUntil: 'domcontentloaded' });
  const button = page.getByRole('button', { name: /Materialize all/ });
  await button.waitFor({ state: 'visible', timeout: 120000 });
  await page.getByText('train_', { exact: false }).first().waitFor({ timeout: 60000 });
  shots.push(path.join(outDir, '1-asset-graph.png'));
  await page.screenshot({ path: shots.at(-1) });
  log('clicking "Materialize all"');
  await button.click();
  // Some Dagster versions confirm in a dialog; click its launch button if one appears.
  const confirm = page.getByRole('dialog').getByRole('button', { name: /Launch|Materialize/ });
  if (await confirm.first().isVisible({ timeout: 3000 }).catch(() => false)) await confirm.first().click();
  const deadline = Date.now() + timeoutMs;
  let run = null;
  while (Date.now() < deadline) {
    const fresh = (await runs()).filter((r) => !before.has(r.runId));
    // the first new run is ours; the automation sensor may launch refresh runs after it lands
    run = run ? fresh.find((r) => r.runId === run.runId) : fresh.at(-1) || null;
    if (run && ['SUCCESS', 'FAILURE', 'CANCELED'].includes(run.status)) break;
    if (run && !shots.some((s) => s.includes('2-running'))) {
      await page.goto(`${base}/runs/${run.runId}`, { waitUntil: 'domcontentloaded' });
      await page.waitForTimeout(4000);
      shots.push(path.join(outDir, '2-running.png'));
      await page.screenshot({ path: shots.at(-1) });
      log(`run ${run.runId} launched (${run.status})`);
    }
    await new Promise((r) => setTimeout(r, 3000));
  }
  if (!run) throw new Error('no run was launched by "Materialize all"');
  log(`run ${run.runId} finished: ${run.status}`);
  await page.goto(`${base}/runs/${run.runId}`, { waitUntil: 'domcontentloaded' });
  await page.getByText(/Success|Failure|Canceled/).first().waitFor({ timeout: 60000 }).catch(() => {});
  await page.waitForTimeout(2000);
  shots.push(path.join(outDir, '3-run-finished.png'));
  await page.screenshot({ path: shots.at(-1) });
  await page.goto(groupUrl, { waitUntil: 'domcontentloaded' });
  await page.getByText('train_', { exact: false }).first().waitFor({ timeout: 60000 });
  await page.waitForTimeout(3000);
  shots.push(path.join(outDir, '4-asset-graph-materialized.png'));
  await page.screenshot({ path: shots.at(-1) });
  const seen = {};
  if (stageAsset) {
    // the stage asset's latest materialization: every attempt's sessions, preemptions and cost
    await page.goto(`${base}/assets/${group}/${stageAsset}`, { waitUntil: 'domcontentloaded' });
    await page.getByText('attempt_history', { exact: false }).first().waitFor({ timeout: 60000 }).catch(() => {});
    await page.waitForTimeout(2000);
    seen.stageText = await page.locator('body').innerText();
    shots.push(path.join(outDir, '5-stage-asset.png'));
    await page.screenshot({ path: shots.at(-1), fullPage: true });
    // the cost report: its plot (markdown metadata with the PNG inline) must render in the UI
    await page.goto(`${base}/assets/${group}/cost_report`, { waitUntil: 'domcontentloaded' });
    await page.getByText('plot', { exact: true }).first().waitFor({ timeout: 60000 }).catch(() => {});
    await page.waitForTimeout(2000);
    const img = page.locator('img[src^="data:image/png"]');
    if ((await img.count()) === 0) {
      // markdown metadata sits behind "[Show Markdown]" in the metadata table: open the plot's
      const row = page.locator('tr').filter({ has: page.locator('td', { hasText: /^plot$/ }) }).first();
      const show = row.getByText('Show Markdown', { exact: false }).first();
      if (await show.isVisible({ timeout: 5000 }).catch(() => false)) {
        await show.click();
        await img.first().waitFor({ state: 'visible', timeout: 15000 }).catch(() => {});
      }
      await page.waitForTimeout(1500);
    }
    seen.plotImages = await img.count();
    seen.plotVisible = seen.plotImages > 0 && (await img.first().isVisible().catch(() => false));
    if (seen.plotVisible) await img.first().scrollIntoViewIfNeeded();
    seen.plotBox = seen.plotVisible ? await img.first().boundingBox() : null;
    shots.push(path.join(outDir, '6-cost-report-plot.png'));
    await page.screenshot({ path: shots.at(-1) });
    await page.keyboard.press('Escape').catch(() => {});
    // the rendered HTML report the analyst opens (path from the materialization's metadata)
    const meta = await graphql(`{ assetOrError(assetKey: {path: ["${group}", "cost_report"]}) { ... on Asset {
      assetMaterializations(limit: 1) { metadataEntries { label ... on PathMetadataEntry { path } } } } } }`);
    const mats = (meta.assetOrError && meta.assetOrError.assetMaterializations) || [];
    const html = mats.length ? mats[0].metadataEntries.find((e) => e.label === 'html') : null;
    if (html && html.path) {
      const report = await browser.newPage({ viewport: { width: 1400, height: 900 } });
      await report.goto(`file://${html.path}`, { waitUntil: 'load' });
      seen.htmlTables = await report.locator('table').count();
      seen.htmlText = await report.locator('body').innerText();
      shots.push(path.join(outDir, '8-cost-report-html.png'));
      await report.screenshot({ path: shots.at(-1), fullPage: true });
      await report.close();
    }
    // the checks tab of the cost report
    await page.goto(`${base}/assets/${group}/cost_report?view=checks`, { waitUntil: 'domcontentloaded' });
    await page.getByText('cost_reconciles_with_node_sessions').first().waitFor({ timeout: 60000 }).catch(() => {});
    await page.waitForTimeout(2000);
    seen.checksText = await page.locator('body').innerText();
    shots.push(path.join(outDir, '7-cost-report-checks.png'));
    await page.screenshot({ path: shots.at(-1) });
  }
  process.stdout.write(JSON.stringify({ runId: run.runId, status: run.status, screenshots: shots, seen }) + '\n');
} finally {
  await browser.close();
}
