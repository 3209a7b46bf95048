"""Start, find and stop one background server through its PID file.

Each server runs in its own session (process group), so stopping it also stops anything
it spawned. A PID file is trusted only while its PID is still the very process that was
started (PIDs get reused): the file holds the PID and when the process started, counted
from the machine's boot, which a change of the wall clock does not move. (Comparing
wall-clock times did: a VM's clock stepped forward by 61 s made every running server look
younger than its PID file, whose removal then lost track of the whole stack.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# How far two readings of one process's start (seconds since boot) may differ: the boot
# time the kernel reports is whole seconds, derived from the wall clock.
SAME_START_SECONDS = 1.5


def _since_boot(proc: psutil.Process) -> float:
    """When `proc` started, in seconds since the machine booted. Both terms move together
    when the wall clock is set, so their difference does not."""
    return proc.create_time() - psutil.boot_time()


def _keep_niceness(pid: int) -> None:
    """Give a server's session the niceness of the command that started it. Linux (with
    autogroups, the default) schedules each session as a group of its own at normal
    priority, whatever its processes' niceness, so without this `nice lakehouse up` (and
    `make test`'s cluster module, run niced beside the suite) competed as an equal."""
    niceness = os.nice(0)
    if niceness > 0:
        with contextlib.suppress(OSError):  # no autogroups here: niceness alone counts
            Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    pid_file: Path
    log_file: Path
    # A word in the process's command line: what identifies it in a PID file of an older
    # version, which holds the PID alone.
    marker: str

    def pid(self) -> int | None:
        """PID of the live process this file names, else None (stale files are removed)."""
        try:
            fields = self.pid_file.read_text().split()
            pid = int(fields[0])
            started = float(fields[1]) if len(fields) > 1 else None
        except (FileNotFoundError, ValueError, IndexError):
            return None
        try:
            proc = psutil.Process(pid)
            alive = proc.status() != psutil.STATUS_ZOMBIE
            if started is not None:
                # the same PID started at the same tick: the very process (its command
                # line is not asked: right after the start it may not show the program yet)
                ours = abs(_since_boot(proc) - started) <= SAME_START_SECONDS
            else:  # a file written before the start time was kept in it
                ours = (self.marker in " ".join(proc.cmdline())
                        and proc.create_time() <= self.pid_file.stat().st_mtime + 1)
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
            alive = ours = False
        if alive and ours:
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def is_running(self) -> bool:
        return self.pid() is not None

    def uptime_seconds(self) -> float | None:
        pid = self.pid()
        if pid is None:
            return None
        try:
            return time.time() - psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            return None

    def start(
        self,
        command: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        user: str | None = None,
    ) -> int:
        """Launch detached, output appended to the log file; returns the PID."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting "
                      f"{self.name}: {' '.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                user=user,
                group=user,
            )
        _keep_niceness(proc.pid)
        try:
            stamp = f"{proc.pid} {_since_boot(psutil.Process(proc.pid)):.2f}\n"
        except psutil.NoSuchProcess:  # ended already: the file names a dead process
            stamp = f"{proc.pid}\n"
        self.pid_file.write_text(stamp)
        return proc.pid

    def exited_early(self) -> int | None:
        """Exit code if the process already ended (reaps it when it was our child)."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None if psutil.pid_exists(pid) else -1
        return os.waitstatus_to_exitcode(status) if done else None

    def stop(self, graceful_signal: int = signal.SIGTERM, timeout: float = 20.0) -> bool:
        """Stop gracefully, then forcefully; True if something was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        try:
            group = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            group = []
        _signal_group(pid, graceful_signal)
        alive = _wait_exited(group, timeout)
        if alive:
            _signal_group(pid, signal.SIGKILL)
            for proc in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            _wait_exited(alive, 5)
        with contextlib.suppress(ChildProcessError):  # reap our own child: no zombie
            os.waitpid(pid, os.WNOHANG)
        self.pid_file.unlink(missing_ok=True)
        return True


# How often a stop looks whether the processes it signalled have exited.
EXIT_POLL_SECONDS = 0.05


def _exited(proc: psutil.Process) -> bool:
    """Whether `proc` has exited: gone, or a zombie of one thread, whose ports and files
    are closed and whose exit status alone waits for its parent. A server outlives the
    `lakehouse up` that started it, so its parent is then the machine's init, which may
    reap late: on the CI machines 2 s after the exit, which `psutil.wait_procs` waited out
    in every stop (a `down` of the 10-server cluster profile took 20 s). A zombie with
    more threads is a JVM whose main thread ended before the others: its sockets are
    still open (seen: a broker's ports still taken right after its stop)."""
    try:
        if not proc.is_running():
            return True
        return proc.status() == psutil.STATUS_ZOMBIE and proc.num_threads() <= 1
    except psutil.NoSuchProcess:
        return True


def _wait_exited(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to `timeout` seconds for every process of `procs` to exit; those still
    running then."""
    deadline = time.monotonic() + timeout
    alive = [proc for proc in procs if not _exited(proc)]
    while alive and time.monotonic() < deadline:
        time.sleep(EXIT_POLL_SECONDS)
        alive = [proc for proc in alive if not _exited(proc)]
    return alive


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
