// A page with a style sheet, an image and a script, served by tern_static
// (reference --static examples/static), loaded in Debian's headless Chromium;
// reports as JSON the navigation's status and protocol, what the page's
// script wrote (it runs only if app.js loaded), whether the style sheet
// applied and the image decoded, and each asset's protocol and size.
//   node static.mjs URL                  (HTTP/1.1 or HTTP/2 over TLS)
//   node static.mjs URL ORIGIN SPKI      (HTTP/3 forced on for ORIGIN)
import { launchChromium } from "./launch.mjs";

const [url, origin, spki] = process.argv.slice(2);
const browser = await launchChromium(origin ? { quic: origin, spki } : {});
try {
  const page = await browser.newPage({ ignoreHTTPSErrors: true });
  const response = await page.goto(url, { timeout: 15000,
                                          waitUntil: "load" });
  const seen = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const assets = {};
    for (const e of performance.getEntriesByType("resource")) {
      assets[new URL(e.name).pathname.split("/").pop()] = {
        protocol: e.nextHopProtocol, size: e.decodedBodySize };
    }
    const logo = document.getElementById("logo");
    return {
      protocol: nav.nextHopProtocol,
      script: document.getElementById("proto").textContent,
      styled: getComputedStyle(document.body).maxWidth !== "none",
      image: logo.complete && logo.naturalWidth > 0,
      assets,
    };
  });
  console.log(JSON.stringify({ status: response.status(), ...seen }));
} finally {
  await browser.close();
}
