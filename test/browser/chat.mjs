// Two Chromium pages join tern's chat room (examples/chat) and talk: the
// first sends a line, both must show it. Reports, as JSON, the
// protocol each page was loaded over, the welcome lines (which name the
// WebSocket's carrier as the server saw it) and what the second page got.
//   node chat.mjs URL [SPKI [NETLOG]]
// With SPKI (chat --quic): HTTP/3, QUIC forced on for URL's origin
// (https://localhost:PORT/) with the certificate trusted by that hash, and
// WebSocket over HTTP/3 (RFC 9220) enabled, so each page's socket is an
// extended CONNECT stream on the page's own HTTP/3 connection (Chromium
// never dials QUIC for a WebSocket: it only reuses an h3 connection whose
// SETTINGS enable CONNECT). NETLOG receives Chromium's net log, to tell
// why a socket went elsewhere.
import { launchChromium } from "./launch.mjs";

const [url, spki, netlog] = process.argv.slice(2);
const extra = spki ? ["--enable-features=EnableWebsocketsOverHttp3"] : [];
if (netlog) extra.push("--log-net-log=" + netlog);
const browser = await launchChromium(
  spki ? { quic: new URL(url).host, spki, extra } : { extra });
try {
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  const open = async () => {
    const page = await context.newPage();
    await page.goto(url, { timeout: 15000 });
    await page.waitForFunction(
      () => document.getElementById("status").textContent.startsWith("welcome"),
      null, { timeout: 15000 });
    return page;
  };
  const a = await open();
  const b = await open();
  const line = "hello from A " + Date.now();
  await a.fill("#text", line);
  await a.click("#send");
  // The room sends the line to both pages, in no set order: wait for
  // each (under load page a's copy may come after page b's).
  for (const p of [b, a]) {
    await p.waitForFunction(
      (l) => document.getElementById("log").textContent.includes(l), line,
      { timeout: 15000 }).catch(() => {});
  }
  const info = async (p) => ({
    protocol: await p.evaluate(
      () => performance.getEntriesByType("navigation")[0].nextHopProtocol),
    welcome: await p.evaluate(
      () => document.getElementById("status").textContent),
    log: await p.evaluate(() => document.getElementById("log").innerText),
  });
  console.log(JSON.stringify({ line, a: await info(a), b: await info(b) }));
} finally {
  await browser.close();
}
