"""`SharedProviderHost`: one provider host process for every engine run of this driver.

Owned by `StackDriver` (``stackOperations.providerHost: shared``, the default). The host is
``python -m stacks.provider_server`` on this interpreter, with the environment the CLI's own
per-run host would get; every CLI process the driver starts is told to attach to it
(``PULUMI_DEBUG_PROVIDERS=pulumi-python:<port>``, the engine's mechanism for a provider
that is already running) instead of starting a Python provider host of its own. That
start (interpreter, pulumi, grpc, boto3 and its service models) was about half the CPU
of every `up` and `destroy` (``bench/bench_stack_ops.py`` prints both modes side by side).

Failure model: the host is started on the first operation and again whenever it is found
dead, so a crash of the host fails at most the operations in flight at that moment (their
engines lose the provider; each is a failed stack operation, retried with the pool's
backoff like any other). Its stdin is a pipe from this process: when the controller exits,
however it exits, the host reads end-of-file and exits too, so it never outlives it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from provisioner.api.constants import FailureKind
from provisioner.pulumi_driver.errors import PROVIDER_HOST_UNAVAILABLE, StackError

__all__ = ["ATTACH_VARIABLE", "SharedProviderHost"]

ATTACH_VARIABLE = "PULUMI_DEBUG_PROVIDERS"
# The plugin name the engine asks for when a program uses Python dynamic providers.
_PROVIDER_NAME = "pulumi-python"
_START_TIMEOUT_SECONDS = 60.0


class SharedProviderHost:
    def __init__(self, env: Mapping[str, str], log: logging.Logger) -> None:
        self._env = {**os.environ, **env}
        self._log = log
        self._guard = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._port = 0
        self.starts = 0

    def attach_environment(self) -> dict[str, str]:
        """The variable that makes a CLI process use this host; starts it when needed."""
        return {ATTACH_VARIABLE: f"{_PROVIDER_NAME}:{self._running_port()}"}

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def close(self) -> None:
        with self._guard:
            process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the host's signal to stop
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _close_pipes(process)

    def _running_port(self) -> int:
        with self._guard:
            process = self._process
            if process is not None and process.poll() is None:
                return self._port
            if process is not None:
                self._log.warning(
                    "provider host (pid %d) exited with %s; starting a new one",
                    process.pid,
                    process.returncode,
                )
                _close_pipes(process)
            self._process, self._port = self._start()
            self.starts += 1
            return self._port

    def _argv(self) -> list[str]:
        # This interpreter: the host imports exactly the `stacks`, boto3 and pulumi the
        # controller does, as the per-run launcher does through ATOMIC_GANG_PYTHON.
        return [sys.executable, "-u", "-m", "stacks.provider_server"]

    def _start(self) -> tuple[subprocess.Popen[bytes], int]:
        argv = self._argv()
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                argv,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise StackError(
                PROVIDER_HOST_UNAVAILABLE,
                f"The provider host ({' '.join(argv)}) did not start: {exc}. Set "
                "stackOperations.providerHost to perOperation to let the CLI start its own.",
                kind=FailureKind.RETRYABLE,
            ) from exc
        port = self._read_port(process, started)
        threading.Thread(
            target=self._forward_stderr, args=(process,), name="provider-host-log", daemon=True
        ).start()
        self._log.info(
            "provider host started (pid %d, port %d) in %.2fs",
            process.pid,
            port,
            time.monotonic() - started,
        )
        return process, port

    def _read_port(self, process: subprocess.Popen[bytes], started: float) -> int:
        assert process.stdout is not None
        line: list[bytes] = []
        reader = threading.Thread(
            target=lambda: line.append(process.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(_START_TIMEOUT_SECONDS)
        text = line[0].decode(errors="replace").strip() if line else ""
        if text.isdigit():
            return int(text)
        process.kill()
        _, err = process.communicate(timeout=10)
        detail = err.decode(errors="replace").strip()[-2000:] or "no output"
        raise StackError(
            PROVIDER_HOST_UNAVAILABLE,
            f"The provider host did not announce its port within "
            f"{time.monotonic() - started:.0f}s ({detail}). Set stackOperations.providerHost "
            "to perOperation to let the CLI start a host per operation.",
            kind=FailureKind.RETRYABLE,
        )

    def _forward_stderr(self, process: subprocess.Popen[bytes]) -> None:
        # What a provider prints (a warning, a traceback before gRPC reports it) reaches
        # the controller's log, as the engine would have forwarded it from its own host.
        assert process.stderr is not None
        with process.stderr:
            for raw in process.stderr:
                text = raw.decode(errors="replace").rstrip()
                if text:
                    self._log.info("provider host: %s", text)


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    # stderr is closed by its reader, at end-of-file.
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()
