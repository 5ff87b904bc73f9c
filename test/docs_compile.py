#!/usr/bin/env python3
"""Every C block in README.md and docs/*.md that begins a translation unit
(it has an #include) compiles against include/tern.h as it is now, with
the project's warnings as errors; one with a main() also links against
the built library. Prints TAP, one line per block.

  test/docs_compile.py SRCDIR LIBDIR CC [CFLAGS...]
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

BLOCK = re.compile(r"```c\n(.*?)```", re.S)


def main():
    src, libdir, cc = sys.argv[1], sys.argv[2], sys.argv[3:]
    files = [os.path.join(src, "README.md")] + sorted(
        glob.glob(os.path.join(src, "docs", "*.md")))
    blocks = []
    for f in files:
        text = open(f, encoding="utf-8").read()
        for m in BLOCK.finditer(text):
            if "#include" in m.group(1):
                line = text.count("\n", 0, m.start()) + 2
                blocks.append((os.path.relpath(f, src), line, m.group(1)))
    print("1..%d" % len(blocks))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, line, code) in enumerate(blocks, 1):
            c = os.path.join(tmp, "b%d.c" % i)
            with open(c, "w") as out:
                out.write(code)
            args = cc + ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                         "-Wno-unused-function", "-Wno-unused-parameter",
                         "-Werror", "-I" + os.path.join(src, "include"), c]
            if "int main" in code:
                args += ["-o", os.path.join(tmp, "b%d" % i), "-L" + libdir,
                         "-ltern", "-Wl,-rpath," + libdir]
                # What the block itself calls beside tern.
                if "<uv.h>" in code:
                    args.append("-luv")
                if "<pthread.h>" in code:
                    args.append("-pthread")
            else:
                args += ["-fsyntax-only"]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode == 0:
                print("ok %d - %s:%d" % (i, name, line))
            else:
                bad += 1
                print("not ok %d - %s:%d" % (i, name, line))
                for l in r.stderr.splitlines()[:12]:
                    print("# " + l)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
