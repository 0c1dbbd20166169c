#!/usr/bin/env python3
"""The include graph between src/ folders follows the layers of
docs/ARCHITECTURE.md: a folder may include only folders listed below it
(rpc/, distgrad/ and parallel/ sit above ddp/; nn/ and data/ see common/ only, the
rest through public headers).  Prints every offending include; exit 1 if
there is one.  Usage: check_layering.py REPO_ROOT"""
import os, re, sys

ORDER = ["common", "auth", "store", "transport", "coll", "group", "ddp", "rpc", "distgrad", "parallel"]
SIDE = {"nn": {"common"}, "data": {"common", "nn"}}  # the training stack

def allowed(src, dst):
    if src == dst:
        return True
    if src in SIDE:
        return dst in SIDE[src]
    if src in ORDER and dst in ORDER:
        return ORDER.index(dst) < ORDER.index(src)
    if src in ORDER and dst in SIDE:
        return src in ("rpc", "distgrad", "parallel")  # above the training stack
    return False

root = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "src")
folders = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
bad = 0
for d in folders:
    for dirpath, _, files in os.walk(os.path.join(root, d)):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = inc.match(line)
                if not m:
                    continue
                parts = m.group(1).split("/")
                target = parts[0] if len(parts) > 1 and parts[0] in folders else d
                if not allowed(d, target):
                    print(f"{path}:{n}: {d}/ includes {m.group(1)} ({target}/ is not below {d}/)")
                    bad += 1
unknown = [d for d in folders if d not in ORDER and d not in SIDE]
for d in unknown:
    print(f"src/{d}/: not placed in the layers (add it to ORDER or SIDE)")
print("layering: %d offending include(s)" % bad)
sys.exit(1 if bad or unknown else 0)
