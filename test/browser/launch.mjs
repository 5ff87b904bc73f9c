// Debian's Chromium, headless, as every browser test starts it: no
// sandbox (root in CI), no background traffic, and self-signed
// certificates accepted. QUIC is off unless `quic` names the origin
// ("localhost:PORT") to force HTTP/3 on: then the certificate is trusted
// through its SPKI hash (`spki`), because Chromium's QUIC verifier ignores
// --ignore-certificate-errors, and every host name but localhost (pinned
// to 127.0.0.1) fails at the resolver, so that nothing leaves loopback.
// `extra` adds flags (features, --log-net-log=FILE).
import { chromium } from "playwright-core";

export function launchChromium({ quic = null, spki = null, extra = [] } = {}) {
  const args = [
    "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update",
    "--disable-sync", ...extra,
  ];
  if (quic) {
    args.push("--origin-to-force-quic-on=" + quic,
              "--ignore-certificate-errors-spki-list=" + spki,
              "--host-resolver-rules=MAP localhost 127.0.0.1, " +
                "MAP * ~NOTFOUND");
  } else {
    args.push("--disable-quic", "--ignore-certificate-errors");
  }
  return chromium.launch({ executablePath: "/usr/bin/chromium", args });
}
