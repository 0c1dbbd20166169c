"""torch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, DistributedTest._DistTestBase, shipped in python3-torch)
run the way upstream's test/distributed/test_distributed_spawn.py runs it:
BACKEND and WORLD_SIZE from the environment, every test in fresh processes
(spawn), rendezvous through a file.

    BACKEND=spmd WORLD_SIZE=2 dist_suite.py [--out RESULTS.json] [--require-pass]
                                            [-k SUBSTR]... [TEST]...

For BACKEND=spmd, spmd is held to exactly what gloo is held to, in two steps:

1. Declared features, as a third-party backend does: spmd is added to every
   DistTestCases.backend_feature set and profiling list that names gloo.

2. The suite's checks of the backend's *name* (about 15 in torch 1.13:
   `@sandcastle_skip_if(BACKEND != "gloo", ...)` on the timeout, batch
   send/recv, sparse all_reduce and object-collective tests; `if BACKEND ==
   "gloo":` branches in bodies) are answered as for gloo, and the tests run
   on spmd:
   - the skip decorators run once, when distributed_test.py is imported, and
     read its module global BACKEND, taken from the environment: this runner
     imports the module with BACKEND=gloo in the environment (in the parent
     and in every spawned rank), so exactly the tests gloo runs are defined
     unskipped, and the environment's BACKEND is put back to spmd at once;
   - then the module's global BACKEND is replaced by "spmd" as a str that
     also compares equal to "gloo" (_SpmdAsGloo): the group the harness
     creates (init_process_group(backend=BACKEND)) is a real spmd group, and
     a body's `BACKEND == "gloo"` takes gloo's branch, so spmd meets the same
     assertions (the expected values, the work-result checks).  Anything
     that asks the group itself (dist.get_backend(), test_get_backend, the
     profiler's "spmd:all_reduce" event names) sees "spmd".
   No outcome is set by this runner: a test passes only by running its body
   on spmd, and spmd's results are the suite's own verdicts.  compare.py
   lists every test passing on gloo and not on spmd.

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

if BACKEND == "spmd":
    os.environ["BACKEND"] = "gloo"  # the import-time skip decisions: as gloo's (see above)
    try:
        from torch.testing._internal.distributed import distributed_test as dt  # noqa: E402
    finally:
        os.environ["BACKEND"] = BACKEND
else:
    from torch.testing._internal.distributed import distributed_test as dt  # noqa: E402


class _SpmdAsGloo(str):
    """"spmd", equal to "gloo" too: a body's gloo branch is spmd's."""

    def __eq__(self, other):
        return other == "gloo" or str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


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
    dt.BACKEND = _SpmdAsGloo("spmd")


# How each test's ranks start: "spawn" (upstream's test_distributed_spawn.py:
# every rank a fresh interpreter importing torch and this suite, about 6 s of
# CPU per rank on the 2-core machine) or "fork" (the ranks are copies of this
# already-imported process: the same test bodies, a fraction of a second to
# start).  This process has made no group and started no thread of spmd's or
# gloo's before the fork, so a forked rank starts as clean as a spawned one.
START_METHOD = os.environ.get("DIST_SUITE_START", "spawn")


class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context(START_METHOD).Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def main(argv):
    global START_METHOD
    import argparse
    import json
    import unittest

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write every test's outcome here (JSON)")
    ap.add_argument("-k", action="append", default=[], help="only tests whose name contains this")
    ap.add_argument("--require-pass", action="store_true",
                    help="a skipped test fails the run too, unless torch skips it for every backend (CI's part of the suite)")
    ap.add_argument("--start", choices=("spawn", "fork"), default=START_METHOD,
                    help="how each test's ranks start (default spawn, as upstream; fork skips their imports)")
    ap.add_argument("--shard", metavar="I/N", help="only the I-th of N interleaved parts of the tests (1-based)")
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
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        if not 1 <= i <= n:
            sys.exit(f"dist_suite: --shard {args.shard}: want I/N with 1 <= I <= N")
        names = names[i - 1::n]
    START_METHOD = args.start
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
          f"torch {torch.__version__} start {START_METHOD}", flush=True)
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
    # A test torch marks skipped at import for every backend (an unconditional
    # @skip, e.g. torch 2.6's test_broadcast_object_list "Test is failing")
    # carries __unittest_skip__; gloo skips it too, so it is no gap of spmd's.
    everyone = [n for n, v in outcome.items()
                if v.startswith("skip") and getattr(getattr(TestDistBackendWithSpawn, n), "__unittest_skip__", False)]
    if everyone:
        print("dist_suite: skipped by torch itself for every backend:", " ".join(sorted(everyone)), flush=True)
    gaps = sorted(n for n, v in outcome.items() if v.startswith("skip") and n not in everyone)
    if args.require_pass and gaps:
        print("dist_suite: skipped, where --require-pass wants a pass:", " ".join(gaps), flush=True)
        return 1
    return 0 if res.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(_ARGV))
