#!/usr/bin/env python3
"""The documentation stands alone (issue 12, point 15): no text in README.md,
docs/, include/, src/, tools/, bench/ or examples/ points at a path of a
build machine or outside the repository (../shared, /work/..., /home/...),
and every relative Markdown link names a file inside the repository that
exists (and, with #anchor, a heading of that file).

Usage: check_doc_links.py SOURCE_DIR"""
import glob
import os
import re
import sys

ROOT = os.path.realpath(sys.argv[1])
BAD = re.compile(r"(\.\./shared\b|/work/|/home/[a-z])")
failed = 0


def anchors(path):
    out = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^#+\s+(.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(a)
    return out


files = [os.path.join(ROOT, "README.md")]
for d, pats in (("docs", ["*.md"]), ("include", ["**/*.h"]), ("src", ["**/*.c", "**/*.h"]),
                ("tools", ["**/*.c", "**/*.h"]), ("bench", ["**/*"]), ("examples", ["**/*.c"])):
    for p in pats:
        files += [f for f in glob.glob(os.path.join(ROOT, d, p), recursive=True) if os.path.isfile(f)]
for f in sorted(set(files)):
    try:
        text = open(f, encoding="utf-8").read()
    except UnicodeDecodeError:
        continue
    rel = os.path.relpath(f, ROOT)
    for no, line in enumerate(text.splitlines(), 1):
        if BAD.search(line):
            print(f"FAIL: {rel}:{no} points outside the repository: {line.strip()}")
            failed += 1
    if not f.endswith(".md"):
        continue
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue   # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = os.path.realpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not dest.startswith(ROOT + os.sep):
            print(f"FAIL: {rel}: link '{target}' leaves the repository")
            failed += 1
        elif not os.path.exists(dest):
            print(f"FAIL: {rel}: link '{target}' names a missing file")
            failed += 1
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            print(f"FAIL: {rel}: link '{target}': no heading '#{anchor}'")
            failed += 1
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
