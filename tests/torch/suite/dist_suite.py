"""torch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, DistributedTest._DistTestBase, shipped in python3-torch)
run the way upstream's test/distributed/test_distributed_spawn.py runs it:
BACKEND and WORLD_SIZE from the environment, every test in fresh processes
(spawn), rendezvous through a file.

    BACKEND=spmd WORLD_SIZE=2 dist_suite.py [--out RESULTS.json] [-k SUBSTR]... [TEST]...

For BACKEND=spmd the backend claims every feature the suite lists gloo for
(DistTestCases.backend_feature, the profiling lists): spmd is held to what
gloo is held to.  Tests whose condition names gloo itself (BACKEND == "gloo")
still skip for spmd; compare.py lists them.

--out writes {test name: "pass" | "skip: reason" | "fail: message" |
"error: message"}; the exit code is 0 when no test failed or erred.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # expecttest.py (Debian has no python3-expecttest)

BACKEND = os.environ.get("BACKEND", "")
if __name__ == "__main__":
    # common_utils parses sys.argv when imported: keep ours from it.
    _ARGV, sys.argv = sys.argv[1:], sys.argv[:1]
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if BACKEND == "spmd":
    import spmd_torch  # noqa: E402,F401  registers "spmd" (in every spawned rank too)

from torch.testing._internal import common_distributed  # noqa: E402
from torch.testing._internal.distributed import distributed_test as dt  # noqa: E402


def _claim_gloo_features(name):
    """`name` offers whatever the suite lists gloo for."""
    for features in common_distributed.DistTestCases.backend_feature.values():
        if "gloo" in features:
            features.add(name)
    for lst in (dt.PROFILING_SUPPORTED_BACKENDS, dt.CUDA_PROFILING_SUPPORTED_BACKENDS,
                dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        if dist.Backend.GLOO in lst and name not in lst:
            lst.append(name)


if BACKEND == "spmd":
    _claim_gloo_features("spmd")


class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def main(argv):
    import argparse
    import json
    import unittest

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write every test's outcome here (JSON)")
    ap.add_argument("-k", action="append", default=[], help="only tests whose name contains this")
    ap.add_argument("tests", nargs="*", help="only these tests (names)")
    args = ap.parse_args(argv)
    if BACKEND not in ("spmd", "gloo") or "WORLD_SIZE" not in os.environ:
        sys.exit("dist_suite: set BACKEND=spmd|gloo and WORLD_SIZE")

    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if args.tests:
        unknown = set(args.tests) - set(names)
        if unknown:
            sys.exit(f"dist_suite: no such tests: {sorted(unknown)}")
        names = [n for n in names if n in args.tests]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)

    outcome = {}

    class Result(unittest.TextTestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            outcome[test._testMethodName] = "pass"

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcome[test._testMethodName] = "skip: " + str(reason)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            outcome[test._testMethodName] = "fail: " + str(err[1]).strip().splitlines()[-1][:300]

        def addError(self, test, err):
            super().addError(test, err)
            outcome[test._testMethodName] = "error: " + str(err[1]).strip()[-300:]

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            outcome[test._testMethodName] = "pass"

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            outcome[test._testMethodName] = "fail: unexpected success"

    print(f"dist_suite: {len(names)} tests, BACKEND={BACKEND} WORLD_SIZE={os.environ['WORLD_SIZE']} "
          f"torch {torch.__version__}", flush=True)
    res = unittest.TextTestRunner(verbosity=2, resultclass=Result).run(suite)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"backend": BACKEND, "world_size": int(os.environ["WORLD_SIZE"]),
                       "torch": torch.__version__, "tests": outcome}, f, indent=1, sort_keys=True)
    counts = {}
    for v in outcome.values():
        k = v.split(":")[0]
        counts[k] = counts.get(k, 0) + 1
    print("dist_suite:", " ".join(f"{k} {counts.get(k, 0)}" for k in ("pass", "skip", "fail", "error")),
          flush=True)
    return 0 if res.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(_ARGV))
