#!/usr/bin/env python3
"""Sum meson's test logs into one line: "N passed, N failed" (and ", N
skipped" when a case did not apply, e.g. pool counts under ASan).

TAP tests count one per "ok"/"not ok" line, so a file of forty cases is
forty results; a test that crashed or timed out without reporting a
failure of its own counts as one more failure. Exits 1 on any failure.
"""
import json
import re
import sys



def print_failures(out, limit=40):
    """The failed cases with the notes under them, so that the end of the
    run (all a CI page may keep) says which case failed and why."""
    shown = 0
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("not ok ") and not line.startswith("Bail out!"):
            continue
        print("  " + line)
        for note in lines[i + 1:]:
            if not note.startswith("#") or shown >= limit:
                break
            print("    " + note[:300])
            shown += 1


passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"summary: {e}", file=sys.stderr)
        failed += 1
        continue
    for line in lines:
        t = json.loads(line)
        out = t.get("stdout") or ""
        skip = len(re.findall(r"^ok \d+.*# SKIP", out, re.M))
        skipped += skip
        ok = len(re.findall(r"^ok \d+", out, re.M)) - skip
        bad = len(re.findall(r"^not ok \d+", out, re.M))
        result = t.get("result", "")
        if ok + bad == 0 and result == "SKIP":
            # Every case skipped (meson then says SKIP for the whole test):
            # counted above, or as one skip when it printed none.
            skipped += 0 if skip else 1
        elif ok + bad == 0:
            ok, bad = (1, 0) if result in ("OK", "EXPECTEDFAIL") else (0, 1)
        elif result not in ("OK", "EXPECTEDFAIL") and bad == 0:
            bad = 1
        passed += ok
        failed += bad
        if result not in ("OK", "EXPECTEDFAIL", "SKIP"):
            print(f"FAILED: {t.get('name')} ({result})")
            print_failures(out)
line = f"{passed} passed, {failed} failed"
print(line + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed or passed == 0 else 0)
