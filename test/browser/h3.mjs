// HTTP/3 in Debian's headless Chromium: load https://ORIGIN/ with QUIC
// forced on for that origin, then, from the page, fetch BIG (a large
// download) and POST a generated body of ECHO_BYTES bytes to ECHO (it must
// come back unchanged), and report what the browser saw as JSON: the
// navigation's status, text and protocol (nextHopProtocol), and for each
// fetch its status, length, SHA-256 and the protocol of its resource
// entry. The caller compares the digests.
//   node h3.mjs ORIGIN SPKI BIG ECHO ECHO_BYTES
//   (ORIGIN: localhost:PORT; ECHO "-" skips the POST)
import { launchChromium } from "./launch.mjs";

const [origin, spki, big, echo, echoBytes] = process.argv.slice(2);
const browser = await launchChromium({ quic: origin, spki });
try {
  const page = await browser.newPage();
  const response = await page.goto("https://" + origin + "/",
                                   { timeout: 15000 });
  const protocol = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0].nextHopProtocol);
  const text = await page.evaluate(() => document.body.innerText);
  const fetched = await page.evaluate(async ([big, echo, n]) => {
    const hex = async (buf) => Array.from(
      new Uint8Array(await crypto.subtle.digest("SHA-256", buf)),
      (b) => b.toString(16).padStart(2, "0")).join("");
    const proto = (url) => {
      const all = performance.getEntriesByName(new URL(url, location).href);
      return all.length ? all[all.length - 1].nextHopProtocol : null;
    };
    const one = async (url, init) => {
      const r = await fetch(url, init);
      const body = await r.arrayBuffer();
      return { status: r.status, length: body.byteLength,
               sha256: await hex(body), protocol: proto(url) };
    };
    const out = { big: await one(big, { cache: "no-store" }) };
    if (echo !== "-") {
      // A body that is not one byte repeated, so that a reordered or
      // dropped piece changes the digest.
      const sent = new Uint8Array(n);
      for (let i = 0; i < n; i++) sent[i] = (i * 7 + (i >> 10)) & 255;
      out.sent_sha256 = await hex(sent);
      out.echo = await one(echo, { method: "POST", body: sent,
                                   cache: "no-store" });
    }
    return out;
  }, [big, echo, Number(echoBytes || 0)]);
  console.log(JSON.stringify({ status: response.status(), protocol, text,
                               ...fetched }));
} finally {
  await browser.close();
}
