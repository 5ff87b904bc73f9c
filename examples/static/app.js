// Says how this page came: the protocol of its navigation entry.
const nav = performance.getEntriesByType("navigation")[0];
document.getElementById("proto").textContent =
  "Loaded over " + (nav && nav.nextHopProtocol ? nav.nextHopProtocol : "?") +
  "; the style sheet " +
  (getComputedStyle(document.body).maxWidth !== "none" ? "applied" : "missing") + ".";
document.title = "tern: static files (script ran)";
