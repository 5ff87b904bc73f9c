// Echo WebSocket messages of every size the HTTP/1.1 suite uses through
// the reference server's /ws from a page loaded over h2, so that Chromium
// opens the socket as an RFC 8441 stream of that connection
// (permessage-deflate is offered as Chromium always does). Reports the page's protocol, how many
// messages came back intact and which did not, as JSON.
//   node wsecho.mjs URL
import { launchChromium } from "./launch.mjs";

const url = process.argv[2];
const browser = await launchChromium();
try {
  const page = await browser.newPage({ ignoreHTTPSErrors: true });
  await page.goto(url, { timeout: 15000 });
  const protocol = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0].nextHopProtocol);
  const max = Number(process.argv[3] || (16 << 20));
  const result = await page.evaluate(async (max) => {
    const sizes = [0, 1, 125, 126, 127, 65535, 65536, 1 << 20, 16 << 20]
      .filter((n) => n <= max);
    const ws = new WebSocket(location.origin.replace("https", "wss") + "/ws");
    ws.binaryType = "arraybuffer";
    const queue = [];
    let wake = null;
    let closed = null;
    ws.onmessage = (e) => { queue.push(e.data); if (wake) wake(); };
    ws.onclose = (e) => { closed = e.code; if (wake) wake(); };
    await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = fail; });
    const next = async () => {
      while (queue.length === 0) {
        if (closed !== null) throw new Error("closed with " + closed);
        await new Promise((ok) => { wake = ok; });
      }
      return queue.shift();
    };
    const make = (n, text, seed) => {
      if (text) { // n bytes of UTF-8: 1, 2 and 3 byte characters
        return "a\u00e9\u20ac".repeat(Math.floor(n / 6)) + "z".repeat(n % 6);
      }
      const b = new Uint8Array(n);
      for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 255;
      return b.buffer;
    };
    const same = (a, b) => {
      if (typeof a === "string" || typeof b === "string") return a === b;
      if (a.byteLength !== b.byteLength) return false;
      const x = new Uint8Array(a), y = new Uint8Array(b);
      for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
      return true;
    };
    let ok = 0;
    const bad = [];
    for (const n of sizes) {
      for (const text of [false, true]) {
        const m = make(n, text, n & 255);
        ws.send(m);
        if (same(await next(), m)) ok++; else bad.push([n, text]);
      }
    }
    // Several in flight at once.
    const burst = [5, 70000, 1 << 20, 300000, 1].map(
      (n, i) => make(n, i % 2 === 0, i));
    for (const m of burst) ws.send(m);
    for (const m of burst)
      if (same(await next(), m)) ok++; else bad.push(["burst", m.length]);
    ws.close();
    return { ok, bad };
  }, max);
  console.log(JSON.stringify({ protocol, ...result }));
} finally {
  await browser.close();
}
