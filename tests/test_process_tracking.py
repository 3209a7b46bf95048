"""A server's PID file (infra/process.py) with real processes, no stack: it keeps naming
the process it started whatever the wall clock does, and never a process that merely got
the same PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from infra.ports import wait_until
from infra.process import ManagedProcess
from tests.conftest import PROJECT_DIR

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


AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


@pytest.mark.skipif(not AUTOGROUPS.exists() or AUTOGROUPS.read_text().strip() != "1",
                    reason="the kernel schedules no session as a group of its own")
def test_a_niced_starter_keeps_its_server_niced(tmp_path: Path) -> None:
    """A server runs in a session of its own, which Linux schedules as a group at normal
    priority unless told: started from `nice -n 7`, the server's group has the starter's
    niceness (and a starter at this test's niceness leaves its group at that)."""
    starter = ("import os, sys; from pathlib import Path; from infra.process import ManagedProcess;"
               "p = ManagedProcess(name='sleeper', pid_file=Path(sys.argv[1]) / 'sleeper.pid',"
               " log_file=Path(sys.argv[1]) / 'sleeper.log', marker='lakehouse-pid-test');"
               f"print(os.nice(0), p.start({SLEEPER!r}))")
    groups = {}
    for increment in (7, 0):
        folder = tmp_path / str(increment)
        folder.mkdir()
        out = subprocess.run(["nice", "-n", str(increment), sys.executable, "-c", starter,
                              str(folder)], capture_output=True, text=True, check=True,
                             cwd=PROJECT_DIR)
        niceness, pid = map(int, out.stdout.split())
        try:
            groups[increment] = (niceness, Path(f"/proc/{pid}/autogroup").read_text())
        finally:
            os.kill(pid, signal.SIGKILL)
    niced, niced_group = groups[7]
    assert niced > os.nice(0) and niced_group.rstrip().endswith(f"nice {niced}"), groups
    # a starter at normal priority leaves the kernel's default (0) for its server's group
    if os.nice(0) == 0:
        assert groups[0][1].rstrip().endswith("nice 0"), groups
