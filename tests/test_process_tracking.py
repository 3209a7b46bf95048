"""A server's PID file (infra/process.py) with real processes, no stack: it keeps naming
the process it started whatever the wall clock does, and never a process that merely got
the same PID."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from infra.ports import wait_until
from infra.process import ManagedProcess

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)  # lakehouse-pid-test"]


@pytest.fixture()
def started(tmp_path: Path) -> Iterator[ManagedProcess]:
    process = ManagedProcess(name="sleeper", pid_file=tmp_path / "sleeper.pid",
                             log_file=tmp_path / "sleeper.log", marker="lakehouse-pid-test")
    pid = process.start(SLEEPER)
    # the started program, not the forked parent's copy any more (old-format files need it)
    assert wait_until(lambda: "lakehouse-pid-test" in " ".join(psutil.Process(pid).cmdline()),
                      10, interval=0.05)
    sleeper = psutil.Process(pid)  # knows its start time: never another process later
    yield process
    process.stop(timeout=5)
    # a test that made the file stale leaves the sleeper unknown to `stop`: ended here
    if sleeper.is_running():
        sleeper.kill()
        sleeper.wait(timeout=5)


def test_the_started_process_is_found_and_stopped(started: ManagedProcess) -> None:
    pid = started.pid()
    assert pid is not None and started.pid_file.read_text().split()[0] == str(pid)
    assert started.stop(timeout=5)
    assert started.pid() is None and not started.pid_file.exists()


def test_a_wall_clock_step_does_not_lose_the_process(started: ManagedProcess) -> None:
    """What a clock stepped forward by a minute looks like from the file's side: the file
    seems written a minute before its process started. The process is still found."""
    pid = started.pid()
    written = started.pid_file.stat().st_mtime
    os.utime(started.pid_file, (written - 61, written - 61))
    assert started.pid() == pid
    assert started.pid_file.exists()


def test_a_reused_pid_is_not_taken_for_the_server(started: ManagedProcess) -> None:
    """The same PID and program, but another start (as after a reboot or PID reuse): the
    file is stale, and removed."""
    pid, since_boot = started.pid_file.read_text().split()
    started.pid_file.write_text(f"{pid} {float(since_boot) - 3600:.2f}\n")
    assert started.pid() is None
    assert not started.pid_file.exists()


def test_a_file_from_before_the_start_stamp_is_still_read(started: ManagedProcess) -> None:
    """A stack started by an earlier version wrote the PID alone."""
    pid = started.pid()
    started.pid_file.write_text(f"{pid}\n")
    assert started.pid() == pid
