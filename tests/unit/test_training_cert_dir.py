"""The fixed-certificate-path wrapper of the training controllers (`devenv.training_controllers`).

The training operator reads its webhook certificate from a path fixed in its source; each
process gets its own directory there. A CI run with the tool cache under /tmp showed the
first form of this wrapper (a whole private /tmp) hiding the binary it was to run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from devenv.training_controllers import _FIXED_CERT_DIR, _fresh_cert_dir, _with_cert_dir

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux")


def test_a_program_under_tmp_runs_and_reads_its_own_certificate_at_the_fixed_path(
    tmp_path: Path,
) -> None:
    assert str(tmp_path).startswith("/tmp/")  # where a tool cache may live
    program = tmp_path / "cache" / "bin" / "controller"
    program.parent.mkdir(parents=True)
    program.write_text(f'#!/bin/sh\ncat "{_FIXED_CERT_DIR}/tls.crt"\n')
    program.chmod(0o755)
    mine = _fresh_cert_dir(tmp_path / "mine")
    (mine / "tls.crt").write_text("mine\n")
    theirs = _fresh_cert_dir(tmp_path / "theirs")
    (theirs / "tls.crt").write_text("theirs\n")

    for cert_dir, expected in ((mine, "mine\n"), (theirs, "theirs\n")):
        done = subprocess.run(
            _with_cert_dir([str(program)], cert_dir), capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected
    # The mount was the process's alone: the machine's path holds neither certificate.
    assert not (Path(_FIXED_CERT_DIR) / "tls.crt").exists()
