"""The soak's chart (SVG, no dependencies): the reference server's RSS,
the fresh-client latency and the open descriptors over time, one panel
each, sharing the time axis; the warm-up is shaded and the latency limit
drawn. The style (font, colours, tick steps) is perf/driver/svg.py's."""

import math

from driver.svg import COLORS, FONT, compact, esc, nice_step

W = 760
LEFT = 64
PLOT_W = W - LEFT - 24
PANEL_H = 130


def _panel(parts, y, samples, key, scale, label, color, duration, warm,
           limit=None, log=False):
    pts = [(s["t"], s[key] * scale) for s in samples
           if s.get(key) is not None]
    fails = [s["t"] for s in samples if key in s and s[key] is None]
    parts.append('<text x="%d" y="%d" font-size="14" font-weight="600" '
                 'fill="#212529">%s</text>' % (LEFT - 48, y, esc(label)))
    y += 12
    top_v = max([v for _, v in pts] + [limit or 0, 1e-9])
    if log:
        lo = 0.1
        # A decade above the limit at least, so that the limit's line
        # sits inside the panel rather than on its edge.
        top_v = 10 ** math.ceil(math.log10(max(top_v, (limit or 1) * 10)))
        fy = lambda v: y + PANEL_H - PANEL_H * (  # noqa: E731
            math.log10(max(v, lo)) - math.log10(lo)) / (
            math.log10(top_v) - math.log10(lo))
        ticks = [10 ** k for k in range(-1, int(math.log10(top_v)) + 1)]
    else:
        step = nice_step(top_v)
        top_v = step * math.ceil(top_v / step)
        fy = lambda v: y + PANEL_H - PANEL_H * v / top_v  # noqa: E731
        ticks = [step * i for i in range(int(round(top_v / step)) + 1)]
    fx = lambda t: LEFT + PLOT_W * t / max(duration, 1e-9)  # noqa: E731
    parts.append('<rect x="%d" y="%d" width="%.1f" height="%d" '
                 'fill="#f1f3f5"/>' % (LEFT, y, fx(min(warm, duration)) - LEFT,
                                       PANEL_H))
    for v in ticks:
        parts.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" '
                     'stroke="#e9ecef"/>' % (LEFT, fy(v), LEFT + PLOT_W,
                                             fy(v)))
        parts.append('<text x="%d" y="%.1f" font-size="10" fill="#868e96" '
                     'text-anchor="end">%s</text>' % (LEFT - 6, fy(v) + 3,
                                                      esc(compact(v))))
    parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#868e96"/>'
                 % (LEFT, y, LEFT, y + PANEL_H))
    parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#868e96"/>'
                 % (LEFT, y + PANEL_H, LEFT + PLOT_W, y + PANEL_H))
    if limit is not None:
        parts.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" '
                     'stroke="#c92a2a" stroke-dasharray="4 3"/>' % (
                         LEFT, fy(limit), LEFT + PLOT_W, fy(limit)))
        parts.append('<text x="%d" y="%.1f" font-size="10" fill="#c92a2a" '
                     'text-anchor="end">limit %s</text>' % (
                         LEFT + PLOT_W, fy(limit) - 3, esc(compact(limit))))
    if pts:
        parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" '
                     'points="%s"/>' % (color, " ".join(
                         "%.1f,%.1f" % (fx(t), fy(v)) for t, v in pts)))
    for t in fails:
        parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" '
                     'stroke="#c92a2a" stroke-width="2"/>' % (
                         fx(t), y, fx(t), y + PANEL_H))
    return y + PANEL_H


def soak_chart(samples, warm, limit_ms, title):
    duration = max([s["t"] for s in samples] + [1.0])
    parts = ['<text x="16" y="30" font-size="19" font-weight="700" '
             'fill="#212529">%s</text>' % esc(title),
             '<text x="16" y="50" font-size="12" fill="#495057">%s</text>'
             % esc("Sampled every second; the warm-up (left out of the RSS "
                   "criterion) is shaded; red marks are failed probes.")]
    y = 84
    y = _panel(parts, y, samples, "rss_kib", 1 / 1024.0, "RSS, MiB",
               COLORS["tern"], duration, warm) + 40
    y = _panel(parts, y, samples, "latency_ms", 1.0,
               "Fresh client GET /, ms (log scale)", COLORS["peer"],
               duration, warm, limit=limit_ms, log=True) + 40
    y = _panel(parts, y, samples, "fds", 1.0, "Open descriptors",
               COLORS["floor"], duration, warm)
    step = nice_step(duration, 6)
    t = 0.0
    while t <= duration + 1e-9:
        x = LEFT + PLOT_W * t / duration
        parts.append('<text x="%.1f" y="%d" font-size="10" fill="#868e96" '
                     'text-anchor="middle">%s s</text>' % (x, y + 14,
                                                          esc(compact(t))))
        t += step
    h = y + 30
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="%s">\n'
            '<rect width="100%%" height="100%%" fill="#ffffff"/>\n%s\n</svg>\n'
            % (W, h, W, h, esc(FONT), "\n".join(parts)))
