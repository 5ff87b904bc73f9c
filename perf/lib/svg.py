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
    for line in [x for f in footer for x in textwrap.wrap(f, 128)]:
        parts.append('<text x="%d" y="%d" font-size="10.5" fill="#868e96">%s</text>'
                     % (LEFT, y, esc(line)))
        y += 14
    h = y + 4
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="%s">\n'
            '<rect width="100%%" height="100%%" fill="#ffffff"/>\n%s\n</svg>\n' % (
                W, h, W, h, esc(FONT), "\n".join(parts)))
