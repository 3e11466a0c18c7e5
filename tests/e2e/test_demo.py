"""The README's demo command, run as CI runs it: to completion, with nothing stranded.

`python -m devenv demo` starts its own embedded default (its own control plane, Kueue, emulator
and controller), runs the three-Job scenario and prints the bill; this asserts on that
output: the warm Job launched nothing, the scarce Job was held with nothing running, the GPU
Job and the GPU JobSet were held at $0 until their Capacity Blocks started, a Job asking for
24 h had the earliest block under the cap bought for it, once, and the bill shows its fee,
every stranded figure is zero and every process it started is gone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_runs_to_completion_with_zero_stranded_node_seconds(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devenv", "demo", "--work-dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "held at $0: check Pending, 0 instances running, Job suspended" in out
    launched = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(train-\S+)\s+\S+\s+[\d.]+s\s+(\d+)$", out, re.MULTILINE)
    }
    assert launched == {"train-a": 2, "train-b": 0, "train-scarce": 2}, out
    pools = {
        m.group(1): (float(m.group(2)), float(m.group(3)))
        for m in re.finditer(r"^(shared|scarce)\s+([\d.]+)\s+([\d.]+)\s+-$", out, re.MULTILINE)
    }
    assert set(pools) == {"shared", "scarce"}, out
    # Billed from EC2's own history: the minimum charge at least, and none of it stranded.
    assert all(billed >= 2 * 60 and stranded == 0.0 for billed, stranded in pools.values())
    assert "instances still running: 0; stranded node-seconds in total: 0.0" in out
    assert "$ kubectl get gnp" in out and "$ pulumi stack ls" in out
    # The embedded default keeps its stacks where production does: S3, KMS secrets.
    assert "PULUMI_BACKEND_URL=s3://atomic-gang-state?region=us-east-1 pulumi stack ls" in out
    assert "stopped every process the demo started" in out
    # The GPU scene: a Capacity Block that starts during the run.
    assert "held at $0 until the block starts: check Pending, 0 instances running" in out
    assert "32 EFA interfaces each, all in placement group" in out
    assert re.search(r"cr-\w+ has 2 of 2 slots free again", out), out
    # The JobSet scene: the gang labelled on a JobSet the real JobSet controller runs, held at
    # $0 on a block that has not started, then admitted on the block's instances.
    assert (
        "JobSet gpu-jobset held at $0 until the block starts: check Pending, 0 instances running"
        in out
    ), out
    assert re.search(
        r"JobSet gpu-jobset admitted: 2 x p5\.48xlarge in cr-\w+, 32 EFA interfaces each", out
    ), out
    assert re.search(r"\] jobset gpu-jobset\s+Complete\s", out), out
    # Each GPU node's wait between Ready and usable: its GPUs and EFA registered by the
    # device-plugin DaemonSets after the Node turned Ready, never at once.
    waits = re.findall(
        r"node \S+: Ready -> usable \(nvidia\.com/gpu 8, vpc\.amazonaws\.com/efa 32 "
        r"allocatable\) after ([\d.]+)s",
        out,
    )
    assert len(waits) == 4, out
    # The purchase scene: three offerings, the soonest over the 800 USD cap; the earliest
    # under it (+5 min, 700 USD) is bought, once; the gang is held at $0 until it starts,
    # then runs on it; the bill shows its upfront fee beside the node-seconds.
    offers = re.findall(
        r"EC2 offers cb-\w+ in \S+: starts .*, ([\d.]+) USD upfront(.*)$", out, re.M
    )
    assert offers == [("900.00", " (over the cap)"), ("700.00", ""), ("500.00", "")], out
    assert re.search(
        r"bought cb-\w+ as (cr-\w+): starts \S+ UTC, 700\.00 USD upfront; the earliest start "
        r"under the 800 USD cap .*; 1 block bought for gpu-bought \(1 PurchaseCapacityBlock",
        out,
    ), out
    assert "gpu-buy held at $0 until the block starts: check Pending, 0 instances running" in out, (
        out
    )
    assert re.search(r"gpu-buy admitted: 2 x p5\.48xlarge in the bought block cr-\w+", out), out
    assert re.search(r"^gpu-bought\s+[\d.]+\s+0\.0\s+700\.00$", out, re.M), out
    assert re.search(
        r"^block cr-\w+ \(pool gpu-bought, 2 instances, .*\): 700\.00 USD upfront", out, re.M
    ), out
