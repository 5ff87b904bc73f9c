// Debian's Chromium, headless, as every browser test starts it: no
// sandbox (root in CI), no QUIC, no background traffic, and self-signed
// certificates accepted.
import { chromium } from "playwright-core";

export function launchChromium() {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update",
      "--disable-sync", "--ignore-certificate-errors",
    ],
  });
}
