// WebSocket over HTTP/3 (RFC 9220) in Debian's Chromium: two pages load
// tern's chat (examples/chat --quic) over h3 with QUIC forced on for the
// origin and EnableWebsocketsOverHttp3 on, so each page's WebSocket is an
// extended CONNECT stream on the page's own HTTP/3 connection (Chromium
// never dials QUIC for a WebSocket: it only reuses an h3 connection whose
// SETTINGS enable CONNECT). The first page sends a line; both must show
// it. Reports, as JSON, each page's navigation protocol, its welcome line
// (which names the carrier the server saw) and its log. NETLOG, if given,
// receives Chromium's net log, to tell why a socket went elsewhere.
//   node chat_h3.mjs ORIGIN SPKI [NETLOG]   (ORIGIN: localhost:PORT)
import { launchChromium } from "./launch.mjs";

const [origin, spki, netlog] = process.argv.slice(2);
const extra = ["--enable-features=EnableWebsocketsOverHttp3"];
if (netlog) extra.push("--log-net-log=" + netlog);
const browser = await launchChromium({ quic: origin, spki, extra });
try {
  const context = await browser.newContext();
  const open = async () => {
    const page = await context.newPage();
    await page.goto("https://" + origin + "/", { timeout: 15000 });
    await page.waitForFunction(
      () => /^(welcome|closed)/.test(
        document.getElementById("status").textContent),
      null, { timeout: 15000 });
    return page;
  };
  const a = await open();
  const b = await open();
  const line = "hello over h3 " + Date.now();
  await a.fill("#text", line);
  await a.click("#send");
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
