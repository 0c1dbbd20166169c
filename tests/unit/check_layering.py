#!/usr/bin/env python3
"""The include graph between folders follows the layers of
docs/ARCHITECTURE.md: a src/ folder may include only folders listed below it
(rpc/, distgrad/ and parallel/ sit above ddp/; nn/ and data/ see common/ only, the
rest through public headers); tools/ and examples/ sit above everything and
nothing below includes them.  Every quoted include is resolved to the file it
names (next to the includer, then under src/, include/, tools/), so a header
reached by a short name is placed where it really lives.  Prints every
offending include; exit 1 if there is one.  Usage: check_layering.py REPO_ROOT"""
import os, re, sys

ORDER = ["common", "auth", "store", "transport", "coll", "group", "ddp", "rpc", "distgrad", "parallel"]
SIDE = {"nn": {"common"}, "data": {"common", "nn"}, "ckpt": {"common"}}  # the training stack
TOP = ["tools", "examples"]  # programs: may include any layer and the public headers

repo = sys.argv[1] if len(sys.argv) > 1 else "."
src = os.path.join(repo, "src")
folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))


def layer_of(path):
    """src/<folder>, 'public' (include/), a TOP folder, or None (elsewhere)."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(repo)).split(os.sep)
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    if rel[0] == "include":
        return "public"
    if rel[0] in TOP:
        return rel[0]
    return None


def resolve(includer, name):
    for base in (os.path.dirname(includer), src, os.path.join(repo, "include"), os.path.join(repo, "tools")):
        cand = os.path.join(base, name)
        if os.path.isfile(cand):
            return cand
    return None


def allowed(a, b):
    if a == b or b == "public":
        return True
    if a in TOP:
        return b in ORDER or b in SIDE or b == a
    if b in TOP:
        return False  # nothing below includes a program's headers
    if a in SIDE:
        return b in SIDE[a]
    if a in ORDER and b in ORDER:
        return ORDER.index(b) < ORDER.index(a)
    if a in ORDER and b in SIDE:
        return a in ("rpc", "distgrad", "parallel")  # above the training stack
    return False


inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
bad = 0
roots = [os.path.join(src, d) for d in folders] + [os.path.join(repo, t) for t in TOP]
for top in roots:
    for dirpath, _, files in os.walk(top):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            here = layer_of(path)
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = inc.match(line)
                if not m:
                    continue
                target = resolve(path, m.group(1))
                if target is None:
                    print(f"{path}:{n}: includes {m.group(1)}, which is nowhere in the tree")
                    bad += 1
                    continue
                there = layer_of(target)
                if there is None or not allowed(here, there):
                    print(f"{path}:{n}: {here}/ includes {m.group(1)} ({there}/ is not below {here}/)")
                    bad += 1
unknown = [d for d in folders if d not in ORDER and d not in SIDE]
for d in unknown:
    print(f"src/{d}/: not placed in the layers (add it to ORDER or SIDE)")
print("layering: %d offending include(s) in src/, %s" % (bad, ", ".join(t + "/" for t in TOP)))
sys.exit(1 if bad or unknown else 0)
