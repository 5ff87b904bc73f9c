// Load a URL in Debian's headless Chromium and report what the browser saw:
// the response status, the page text and the protocol the navigation used
// (performance entry nextHopProtocol: "h2", "http/1.1", ...), as JSON.
//   node fetch.mjs URL
import { launchChromium } from "./launch.mjs";

const url = process.argv[2];
const browser = await launchChromium();
try {
  const page = await browser.newPage({ ignoreHTTPSErrors: true });
  const response = await page.goto(url, { timeout: 15000 });
  const protocol = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0].nextHopProtocol);
  const text = await page.evaluate(() => document.body.innerText);
  console.log(JSON.stringify({ status: response.status(), protocol, text }));
} finally {
  await browser.close();
}
