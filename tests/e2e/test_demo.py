"""The README's demo command, run as CI runs it: to completion, with nothing stranded.

`python -m devenv demo` starts its own embedded default (its own control plane, Kueue, emulator
and controller), runs the three-Job scenario and prints the bill; this asserts on that
output: the warm Job launched nothing, the scarce Job was held with nothing running, every
stranded figure is zero and every process it started is gone.
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
    rows = {
        m.group(1): (int(m.group(2)), float(m.group(3)), float(m.group(4)))
        for m in re.finditer(
            r"^(train-\S+)\s+\S+\s+[\d.]+s\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", out, re.MULTILINE
        )
    }
    assert set(rows) == {"train-a", "train-b", "train-scarce"}, out
    assert rows["train-a"][0] == 2
    assert rows["train-b"][0] == 0, "the warm Job launched nothing"
    assert rows["train-scarce"][0] == 2
    assert all(stranded == 0.0 for _, _, stranded in rows.values())
    assert "instances still running: 0; stranded node-seconds in total: 0.0" in out
    assert "$ kubectl get gnp" in out and "$ pulumi stack ls" in out
    # The embedded default keeps its stacks where production does: S3, KMS secrets.
    assert "PULUMI_BACKEND_URL=s3://atomic-gang-state?region=us-east-1 pulumi stack ls" in out
    assert "stopped every process the demo started" in out
