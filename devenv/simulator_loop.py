"""The loop the Job and Pod simulators share: informers started, then one pass every
`poll_interval` on a daemon thread until `stop()`.

`JobSimulator` (`jobsim.py`) and `PodSimulator` (`podsim.py`) each read what they act on from
informers (a list, then a watch) and write what a missing Kubernetes component would. This
base owns the part that is the same for both: starting those informers, waiting for them to
sync before the first pass, running `run_once` on a thread, logging a failed pass and going
on (the next pass retries: one bad write must not end it), and stopping the thread and the
informers. A subclass names its informers (`_open_informers`) and does one pass (`run_once`).
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from kubernetes import client as k8s

from provisioner.kube.client import KubeClient
from provisioner.kube.informer import Informer


@dataclass
class SimulatorLoop(ABC):
    """Runs `run_once` every `poll_interval` over the caches `_open_informers` opened."""

    api: k8s.ApiClient
    run_seconds: float = 3.0
    poll_interval: float = 0.5
    # A wave of hundreds of objects starts and finishes at once: one write at a time, each a
    # round trip to a busy apiserver, made the last of a wave finish tens of seconds after
    # its first.
    write_threads: int = 8
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _informers: list[Informer] = field(default_factory=list)

    # The thread's name, and what a failed pass's warning calls the simulator.
    thread_name: ClassVar[str]
    what: ClassVar[str]
    logger: ClassVar[logging.Logger]

    @abstractmethod
    def _open_informers(self, kube: KubeClient) -> list[Informer]:
        """The informers a pass reads, made (not started) and kept where the pass finds them."""

    @abstractmethod
    def run_once(self) -> None:
        """One pass over what the informers hold."""

    def start(self) -> None:
        self._informers = self._open_informers(KubeClient(self.api))
        for informer in self._informers:
            informer.start()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for informer in self._informers:
            informer.stop()

    def _loop(self) -> None:
        for informer in self._informers:
            informer.wait_for_sync(timeout=60)
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the next pass retries; one bad write must not end it
                self.logger.warning("%s pass failed: %s", self.what, exc)
            self._stop.wait(self.poll_interval)
