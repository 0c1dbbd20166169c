#!/usr/bin/env python3
"""examples/torch/elastic_ddp.py under spmdrun at world 3, one rank
SIGKILLed (by itself, for real) in the middle of step 5.  One scenario per
run (the argument):

  shrink  rank 2 killed, --on-failure shrink: ranks 0 and 1 recover in place,
          the replaced process group refuses operations;
  rank0   rank 0 killed (the default group's rank 0: no rank hosts its store
          under spmdrun), --on-failure shrink: ranks 1 and 2 go on;
  replace rank 1 killed, --on-failure replace: ranks 0 and 2 recover, spmdrun
          starts a joiner, they grow back to world 3 and it receives the model.

Every process left finishes every step at the expected world with
bit-identical parameters, and a no-group all_reduce of ones on torch's
default group (the new group) sums to that world; spmdrun reports the loss
and exits 0."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch", "elastic_ddp.py")
STEPS = 12

# scenario: (--on-failure, killed rank, the ranks that go on, final world)
SCENARIOS = {
    "shrink": ("shrink", 2, (0, 1), 2),
    "rank0": ("shrink", 0, (1, 2), 2),
    "replace": ("replace", 1, (0, 2), 3),
}


def finished(who, world, recoveries):
    return (f"{who}: {STEPS} steps at world {world} after {recoveries} recoveries; "
            f"replicas' parameters equal; all_reduce of ones {world}")


def main():
    scenario = sys.argv[1]
    on_failure, killed, survivors, world = SCENARIOS[scenario]
    cmd = [os.environ["SPMDRUN"], "--standalone", "--nproc-per-node", "3", "--on-failure", on_failure,
           sys.executable, EXAMPLE, "--steps", str(STEPS), "--kill-rank", str(killed), "--kill-at-step", "5",
           "--check-old-group"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=170)
    out = p.stdout
    sys.stdout.write(out)
    sys.stderr.write(p.stderr)
    assert p.returncode == 0, f"spmdrun exited {p.returncode}"
    for r in survivors:
        who = f"rank {r}"
        assert f"{who}: step 5: [{killed}] failed; recovering" in out, f"{who} did not name rank {killed}"
        assert f"{who}: the replaced group refuses: spmd allreduce: rank {r}: this process group was " \
            "replaced" in out, f"{who}: the old group did not refuse"
        assert f"{who}: world 3 -> 2" in out, f"{who} did not shrink to 2"
        if scenario == "replace":
            assert f"{who}: 1 joined: world 3" in out, f"{who} did not grow back to 3"
        assert finished(who, world, 1) in out, f"{who} did not finish with equal replicas at world {world}"
    assert f"rank {killed}: {STEPS} steps" not in out, "the killed rank went on"
    if scenario == "replace":
        joined = re.findall(r"^(joiner \d+): joined as rank 2 of 3 after step (\d+)$", out, re.M)
        assert len(joined) == 1, f"expected one joiner as rank 2 of 3, got {joined}"
        assert int(joined[0][1]) >= 5, f"the joiner came in after step {joined[0][1]}, before the kill"
        assert finished(joined[0][0], 3, 0) in out, "the joiner did not finish with the members' replica"
    assert "1 worker(s) lost" in p.stderr, "spmdrun did not report the lost worker"
    print(f"torch_elastic {scenario}: ok")


if __name__ == "__main__":
    main()
