"""Compare two dist_suite.py result files of one torch and world size:

    compare.py GLOO.json SPMD.json

prints each backend's counts (pass, skip, fail, error) and every test that
passes on gloo but not on spmd, with spmd's outcome.  Exit code 1 when there
is one."""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def counts(tests):
    c = {"pass": 0, "skip": 0, "fail": 0, "error": 0}
    for v in tests.values():
        c[v.split(":")[0]] += 1
    return c


def main(gloo_path, spmd_path):
    gloo, spmd = load(gloo_path), load(spmd_path)
    for r in (gloo, spmd):
        c = counts(r["tests"])
        print(f"{r['backend']:5} world {r['world_size']} torch {r['torch']}: "
              + " ".join(f"{k} {v}" for k, v in c.items()))
    worse = sorted(n for n, v in gloo["tests"].items()
                   if v == "pass" and spmd["tests"].get(n) != "pass")
    for n in worse:
        print(f"  gloo passes, spmd does not: {n}: {spmd['tests'].get(n, 'not run')}")
    print(f"{len(worse)} tests pass on gloo but not on spmd")
    return 1 if worse else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
