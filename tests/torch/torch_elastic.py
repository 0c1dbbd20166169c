#!/usr/bin/env python3
"""examples/torch/elastic_ddp.py under spmdrun --on-failure shrink at world 3,
rank 2 SIGKILLed (by itself, for real) in the middle of step 5: the two
survivors recover in place, finish every step, and their parameters are
bit-identical; the replaced process group refuses operations; spmdrun reports the lost worker and exits 0."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch", "elastic_ddp.py")


def main():
    steps = 12
    cmd = [os.environ["SPMDRUN"], "--standalone", "--nproc-per-node", "3", "--on-failure", "shrink",
           sys.executable, EXAMPLE, "--steps", str(steps), "--kill-rank", "2", "--kill-at-step", "5",
           "--check-old-group"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=170)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    assert p.returncode == 0, f"spmdrun exited {p.returncode}"
    for r in (0, 1):
        assert f"rank {r}: step 5: [2] failed; recovering" in p.stdout, f"rank {r} did not name rank 2"
        assert f"rank {r}: the replaced group refuses: spmd allreduce: rank {r}: this process group was " \
            "replaced" in p.stdout, f"rank {r}: the old group did not refuse"
        assert f"rank {r}: world 3 -> 2" in p.stdout, f"rank {r} did not shrink to 2"
        assert f"rank {r}: {steps} steps at world 2 after 1 recoveries; replicas' parameters equal" \
            in p.stdout, f"rank {r} did not finish with equal replicas"
    assert "rank 2:" not in p.stdout, "the killed rank went on"
    assert "1 worker(s) lost" in p.stderr, "spmdrun did not report the lost worker"
    print("torch_elastic: ok")


if __name__ == "__main__":
    main()
