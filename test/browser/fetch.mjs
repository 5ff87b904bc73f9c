// Load a URL in Debian's headless Chromium and report what the browser saw:
// the response status, the page text and the protocol the navigation used
// (performance entry nextHopProtocol: "h2", "http/1.1", ...) and, over TLS,
// the TLS version ("TLS 1.3"), as JSON.
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
  const details = await response.securityDetails();
  const tls = details ? details.protocol : null;
  console.log(JSON.stringify({ status: response.status(), protocol, text,
                               tls }));
} finally {
  await browser.close();
}
