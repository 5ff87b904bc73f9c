"""Horizontal ranked bar charts (SVG, no dependencies).

One chart per scenario, one panel per metric: bars ranked best first, tern
highlighted, the floor drawn as a grey reference, min-max whiskers over the
rounds, the median printed at the end of each bar, invalid and n/a servers
listed under the bars with the word instead of a bar.
"""

import math
import textwrap

from . import common

W = 760
LEFT = 16
LABEL_W = 196
X0 = LEFT + LABEL_W
BAR_W = W - X0 - 140
ROW = 26
BAR_H = 16
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"

COLORS = {"tern": "#e8590c", "floor": "#adb5bd", "peer": "#4c6ef5"}


def esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;").replace('"', "&quot;"))


def nice_step(vmax, ticks=4):
    if vmax <= 0:
        return 1.0
    raw = vmax / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def compact(v):
    a = abs(v)
    if a >= 1e6:
        return ("%.1fM" % (v / 1e6)).replace(".0M", "M")
    if a >= 1e3:
        return ("%.1fk" % (v / 1e3)).replace(".0k", "k")
    if a >= 10 or v == 0:
        return "%.0f" % v
    return "%.2g" % v


def fmt(v, spec):
    if spec == "bytes":
        return common.human_bytes(v)
    return format(v, spec)


def chart(title, subtitle, panels, footer):
    """panels: [{'label', 'unit', 'better', 'fmt', 'entries': [
        {'name', 'label', 'status', 'median', 'min', 'max', 'why'}]}]"""
    parts = []
    y = 30
    parts.append('<text x="%d" y="%d" font-size="19" font-weight="700" '
                 'fill="#212529">%s</text>' % (LEFT, y, esc(title)))
    y += 20
    for line in textwrap.wrap(subtitle or "", 112):
        parts.append('<text x="%d" y="%d" font-size="12" fill="#495057">%s</text>'
                     % (LEFT, y, esc(line)))
        y += 16
    y -= 8
    for panel in panels:
        if not any(e["status"] == "ok" and e["median"] is not None
                   for e in panel["entries"]) and len(panels) > 1:
            continue  # a metric nobody has a figure for (no shim, say)
        y += 30
        better = panel["better"]
        parts.append('<text x="%d" y="%d" font-size="14" font-weight="600" '
                     'fill="#212529">%s%s <tspan font-weight="400" fill="#868e96">'
                     '(%s is better)</tspan></text>' % (
                         LEFT, y, esc(panel["label"]),
                         (", " + esc(panel["unit"])) if panel["unit"] else "",
                         better))
        y += 10
        ok = [e for e in panel["entries"] if e["status"] == "ok"
              and e["median"] is not None]
        rest = [e for e in panel["entries"] if e not in ok]
        ok.sort(key=lambda e: e["median"], reverse=(better == "higher"))
        vmax = max([max(e["max"] if e["max"] is not None else e["median"],
                        e["median"]) for e in ok] + [0])
        step = nice_step(vmax)
        top = step * math.ceil(vmax / step) if vmax > 0 else 1.0
        scale = BAR_W / top
        n_rows = len(ok) + len(rest)
        grid_top, grid_bot = y, y + n_rows * ROW + 4
        # grid lines and tick labels
        t = 0.0
        while t <= top * 1.0001:
            x = X0 + t * scale
            parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" '
                         'stroke="#e9ecef" stroke-width="1"/>' % (
                             x, grid_top, x, grid_bot))
            parts.append('<text x="%.1f" y="%d" font-size="10" fill="#adb5bd" '
                         'text-anchor="middle">%s</text>' % (
                             x, grid_bot + 12, esc(compact(t))))
            t += step
        parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#868e96" '
                     'stroke-width="1"/>' % (X0, grid_top, X0, grid_bot))
        for i, e in enumerate(ok + rest):
            cy = y + i * ROW + ROW // 2 + 2
            is_tern = e["name"] == "tern"
            color = COLORS["tern"] if is_tern else COLORS.get(e["name"], COLORS["peer"])
            weight = "700" if is_tern else "400"
            parts.append('<text x="%d" y="%d" font-size="12.5" font-weight="%s" '
                         'fill="#212529" text-anchor="end">%s</text>' % (
                             X0 - 8, cy + 4, weight, esc(e["label"])))
            if e in rest:
                word = e["status"] if e["status"] in ("n/a", "invalid") else "no figure"
                parts.append('<text x="%d" y="%d" font-size="12" font-style="italic" '
                             'fill="%s">%s%s</text>' % (
                                 X0 + 6, cy + 4,
                                 "#c92a2a" if word == "invalid" else "#868e96",
                                 esc(word), esc((": " + e["why"][:70]) if e.get("why") else "")))
                continue
            w = max(e["median"] * scale, 1.5 if e["median"] > 0 else 0)
            parts.append('<rect x="%d" y="%d" width="%.1f" height="%d" rx="2" '
                         'fill="%s"><title>%s: %s</title></rect>' % (
                             X0, cy - BAR_H // 2, w, BAR_H, color,
                             esc(e["label"]), esc(fmt(e["median"], panel["fmt"]))))
            end = X0 + w
            lo, hi = e.get("min"), e.get("max")
            if lo is not None and hi is not None and hi > lo:
                x1, x2 = X0 + lo * scale, X0 + hi * scale
                parts.append('<g stroke="#212529" stroke-width="1.3">'
                             '<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'
                             '<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'
                             '<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/></g>' % (
                                 x1, cy, x2, cy, x1, cy - 5, x1, cy + 5,
                                 x2, cy - 5, x2, cy + 5))
                end = max(end, x2)
            parts.append('<text x="%.1f" y="%d" font-size="12" font-weight="%s" '
                         'fill="#212529">%s</text>' % (
                             end + 6, cy + 4, weight,
                             esc(fmt(e["median"], panel["fmt"]))))
        y = grid_bot + 14
    y += 24
    return _finish(parts, y, footer)


def _finish(parts, y, footer):
    """The footer lines from y down, then the whole document."""
    for line in [x for f in footer for x in textwrap.wrap(f, 128)]:
        parts.append('<text x="%d" y="%d" font-size="10.5" fill="#868e96">%s</text>'
                     % (LEFT, y, esc(line)))
        y += 14
    h = y + 4
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="%s">\n'
            '<rect width="100%%" height="100%%" fill="#ffffff"/>\n%s\n</svg>\n' % (
                W, h, W, h, esc(FONT), "\n".join(parts)))


def lines(title, subtitle, series, xlabel, ylabel, footer=()):
    """A line chart with a logarithmic y axis (latencies from 100 µs to
    seconds share one chart). series: [{'label', 'name', 'dash',
    'points': [(x, y or None)]}]; a None y (no valid figure) breaks the
    line and is marked with a cross on the x axis."""
    ys = [y for s in series for _, y in s["points"] if y is not None and y > 0]
    xs = [x for s in series for x, _ in s["points"]]
    if not ys or not xs:
        return chart(title, subtitle, [], list(footer) + ["no valid figures"])
    lo = 10 ** math.floor(math.log10(min(ys)))
    hi = 10 ** math.ceil(math.log10(max(ys)))
    if hi <= lo:
        hi = lo * 10
    xmax = max(xs)
    px0, pw, py0, ph = LEFT + 70, W - LEFT - 70 - 200, 0, 300
    parts = ['<text x="%d" y="30" font-size="19" font-weight="700" '
             'fill="#212529">%s</text>' % (LEFT, esc(title))]
    y = 50
    for line in textwrap.wrap(subtitle or "", 112):
        parts.append('<text x="%d" y="%d" font-size="12" fill="#495057">%s</text>'
                     % (LEFT, y, esc(line)))
        y += 16
    py0 = y + 26

    def sx(x):
        return px0 + pw * x / xmax

    def sy(v):
        return py0 + ph - ph * (math.log10(v) - math.log10(lo)) / (
            math.log10(hi) - math.log10(lo))

    d = lo
    while d <= hi * 1.0001:
        parts.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e9ecef"/>'
                     % (px0, sy(d), px0 + pw, sy(d)))
        parts.append('<text x="%d" y="%.1f" font-size="10" fill="#868e96" '
                     'text-anchor="end">%s</text>' % (px0 - 6, sy(d) + 3,
                                                     esc(compact(d))))
        d *= 10
    for x in sorted(set(xs)):
        parts.append('<text x="%.1f" y="%d" font-size="10" fill="#868e96" '
                     'text-anchor="middle">%s</text>' % (sx(x), py0 + ph + 14,
                                                        esc(compact(x))))
    parts.append('<text x="%.1f" y="%d" font-size="11" fill="#495057" '
                 'text-anchor="middle">%s</text>' % (px0 + pw / 2, py0 + ph + 30,
                                                    esc(xlabel)))
    parts.append('<text x="%d" y="%d" font-size="11" fill="#495057">%s</text>'
                 % (LEFT, py0 - 14, esc(ylabel)))
    ly = py0 + 6
    for k, s in enumerate(series):
        color = s.get("color") or (
            COLORS["tern"] if s["name"] == "tern" else COLORS["peer"])
        dash = ' stroke-dasharray="6 4"' if s.get("dash") else ""
        run = []
        for x, v in s["points"] + [(None, None)]:
            if v is not None and v > 0:
                run.append("%.1f,%.1f" % (sx(x), sy(v)))
                parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>'
                             % (sx(x), sy(v), color))
                continue
            if len(run) > 1:
                parts.append('<polyline fill="none" stroke="%s" stroke-width="2"'
                             '%s points="%s"/>' % (color, dash, " ".join(run)))
            run = []
            if x is not None:
                parts.append('<text x="%.1f" y="%d" font-size="12" fill="%s" '
                             'text-anchor="middle">×</text>' % (
                                 sx(x), py0 + ph - 4 - 12 * k, color))
        parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" '
                     'stroke-width="2"%s/>' % (px0 + pw + 14, ly, px0 + pw + 34,
                                               ly, color, dash))
        parts.append('<text x="%d" y="%d" font-size="11.5" fill="#212529">%s</text>'
                     % (px0 + pw + 40, ly + 4, esc(s["label"])))
        ly += 18
    return _finish(parts, py0 + ph + 50, footer)
