// A WebSocket from a page Chromium loaded over HTTP/3: load
// https://ORIGIN/scope/x with QUIC forced on for that origin, open
// wss://ORIGIN/ws-scope (test/net/python/apps.py answers with the
// WebSocket's ASGI scope), echo one message, and report as JSON the
// page's protocol, the http_version the server saw for the socket and
// the echo. Chromium 156 opens such a socket over HTTP/1.1 (it has no
// RFC 9220 yet), which tern serves on the same port number over TCP.
//   node wsh3.mjs ORIGIN SPKI
import { launchChromium } from "./launch.mjs";

const [origin, spki] = process.argv.slice(2);
const browser = await launchChromium({ quic: origin, spki });
try {
  const page = await browser.newPage();
  await page.goto("https://" + origin + "/scope/x", { timeout: 15000 });
  const protocol = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0].nextHopProtocol);
  const r = await page.evaluate(async () => {
    const ws = new WebSocket("wss://" + location.host + "/ws-scope");
    const got = [];
    await new Promise((ok, fail) => {
      ws.onmessage = (e) => {
        got.push(e.data);
        if (got.length === 1) ws.send("from an h3 page");
        else { ws.close(); ok(); }
      };
      ws.onerror = () => fail(new Error("websocket error"));
    });
    return { version: JSON.parse(got[0]).http_version, echo: got[1] };
  });
  console.log(JSON.stringify({ protocol, ...r }));
} finally {
  await browser.close();
}
