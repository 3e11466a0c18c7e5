"""`bench.backend_requests`: the emulator's access-log lines as state-bucket and KMS
requests, named by kind and by key with the project, stack, lock id and time left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.backend_requests import BackendRequests, classify, where

PREFIX = "2026-12-03 00:00:00,000 atomic-gang.emulator.access INFO "


@pytest.mark.parametrize(
    ("key", "named"),
    [
        (".pulumi/meta.yaml", "meta.yaml"),
        (".pulumi/stacks/", "stacks/"),
        ("team/.pulumi/stacks/proj/", "stacks/P/"),
        (".pulumi/stacks/proj/pool-a.json", "stacks/P/S.json"),
        (".pulumi/stacks/proj/pool-a.json.bak", "stacks/P/S.json.bak"),
        (".pulumi/stacks/proj/pool-a.pulumi-tags", "stacks/P/S.pulumi-tags"),
        (".pulumi/locks/proj/pool-a/", "locks/P/S/"),
        (".pulumi/locks/proj/pool-a/1b2c-3d.json", "locks/P/S/ID.json"),
        (".pulumi/history/proj/pool-a/", "history/P/S/"),
        (".pulumi/history/proj/pool-a/pool-a-17.history.json", "history/P/S/S-T.history.json"),
        (".pulumi/backups/proj/pool-a/pool-a.17.json", "backups/P/S/S-T.17.json"),
    ],
)
def test_a_key_is_named_without_its_project_stack_lock_or_time(key: str, named: str) -> None:
    assert where(key) == named


def test_each_line_is_a_request_of_the_bucket_or_kms_or_nothing() -> None:
    lines = {
        '"GET /state?list-type=2&prefix=.pulumi%2Fstacks%2Fp%2Fs.json&delimiter=%2F" 200': (
            "LIST",
            "stacks/P/S.json",
        ),
        '"PUT /state/.pulumi/stacks/p/s.json.bak" 200 copy=state/.pulumi/stacks/p/s.json': (
            "COPY",
            "stacks/P/S.json.bak",
        ),
        '"HEAD /state/.pulumi/stacks/p/s.json" 404': ("HEAD", "stacks/P/S.json"),
        '"POST /state?delete" 200': ("DELETE (batch)", ""),
        '"POST /" 200 target=TrentService.GenerateDataKey': ("kms", "GenerateDataKey"),
    }
    for line, request in lines.items():
        assert classify(PREFIX + line, "state") == request, line
    assert classify(PREFIX + '"POST /" 200', "state") is None  # EC2's query protocol
    assert classify(PREFIX + '"GET /other/key" 200', "state") is None
    assert classify("a line of something else", "state") is None


def test_take_counts_the_lines_written_since_the_last_take(tmp_path: Path) -> None:
    log = tmp_path / "emulator.log"
    log.write_text(PREFIX + '"GET /state/.pulumi/meta.yaml" 200\n')
    requests = BackendRequests(log, "state")  # what was there before is not counted
    with log.open("a") as out:
        out.write(PREFIX + '"PUT /state/.pulumi/stacks/p/s.json" 200\n')
        out.write(PREFIX + '"PUT /state/.pulumi/stacks/p/s.json" 200\n')
        out.write(PREFIX + '"GET /state/.pulumi/me')  # still being written
    assert requests.take() == {("PUT", "stacks/P/S.json"): 2}
    with log.open("a") as out:
        out.write('ta.yaml" 200\n')
    assert requests.take() == {("GET", "meta.yaml"): 1}
    assert requests.take() == {}
