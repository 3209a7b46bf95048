"""What every embedded server has: ports, binaries, a process, a health check, a version."""

from __future__ import annotations

import signal
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from infra.ports import port_holder, port_is_free, wait_until
from infra.process import ManagedProcess
from settings import Settings
from settings.layout import StateLayout
from settings.report import Report


class StackError(Exception):
    """A component that cannot start or is unhealthy; names it, and the port or file and log."""

    def __init__(self, component: str, message: str, log: Path | None = None):
        self.component = component
        self.log = log
        text = f"{component}: {message}"
        if log is not None:
            text += f"\n  log: {log}"
        super().__init__(text)


@dataclass(frozen=True)
class Port:
    label: str
    number: int
    setting: str  # the configuration variable that chooses it


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    state: str  # healthy | unhealthy | stopped | reachable | unreachable
    address: str
    version: str
    uptime_seconds: float | None
    pid: int | None


def tail(path: Path, lines: int = 15) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    return "\n".join(content[-lines:])


class Component(ABC):
    name: str
    marker: str  # text in the command line that identifies our process
    graceful_signal: int = signal.SIGTERM
    start_timeout: float = 60.0
    stop_timeout: float = 20.0
    # Components sharing a group are launched together, then awaited (a quorum's nodes).
    start_group: str | None = None

    def __init__(self, settings: Settings, layout: StateLayout):
        self.settings = settings
        self.layout = layout
        self.started_in = 0.0
        self._began = time.monotonic()
        self.notes: list[str] = []  # what start() did besides starting, for the report
        self.process = ManagedProcess(
            name=self.name,
            pid_file=layout.pid_file(self.name),
            log_file=layout.log_file(self.name),
            marker=self.marker,
        )

    # -- what each component defines -------------------------------------------------
    @abstractmethod
    def address(self) -> str: ...

    @abstractmethod
    def ports(self) -> list[Port]: ...

    @abstractmethod
    def binaries(self) -> list[Path]: ...

    @abstractmethod
    def command(self) -> list[str]: ...

    @abstractmethod
    def healthy(self) -> bool:
        """A real request to the server; True only if it answers as expected."""

    @abstractmethod
    def version(self) -> str: ...

    def wanted(self) -> bool:
        """Whether `up` starts this component (an optional one says no unless configured;
        `down` stops it and `status` shows it whenever it runs)."""
        return True

    def environment(self) -> dict[str, str] | None:
        return None

    def run_as(self) -> str | None:
        return None

    def working_dir(self) -> Path | None:
        return None

    def prepare(self) -> None:
        """Write config files, initialise data folders; runs before each start."""

    def after_healthy(self) -> None:
        """Create what the server must hold (buckets, databases) once it answers."""

    # -- shared behaviour -----------------------------------------------------------
    def check_binaries(self) -> None:
        for binary in self.binaries():
            if not binary.exists():
                raise StackError(
                    self.name,
                    f"binary not found: {binary}; run `make setup` to install it",
                    self.process.log_file,
                )

    def check_ports(self) -> None:
        for port in self.ports():
            if not port_is_free(port.number):
                raise StackError(
                    self.name,
                    f"port {port.number} ({port.label}) on 127.0.0.1 is already in use by "
                    f"{port_holder(port.number)}; stop that process or choose another port "
                    f"with {port.setting}",
                    self.process.log_file,
                )

    def start(self) -> None:
        self.launch()
        self.wait_healthy()

    def launch(self) -> None:
        """Check, prepare and start the process without waiting for it to answer."""
        self.notes = []
        self.check_binaries()
        self.check_ports()
        self.prepare()
        self._began = time.monotonic()
        self.process.start(self.command(), env=self.environment(), cwd=self.working_dir(),
                           user=self.run_as())

    def wait_healthy(self) -> None:
        """Wait for the launched process's health check; stop it and explain on failure."""
        fatal: list[StackError] = []

        def check() -> bool:
            try:
                return self.healthy()
            except StackError as exc:  # a health check that knows waiting will not help
                fatal.append(exc)
                return False

        if not wait_until(check, self.start_timeout,
                          abort=lambda: bool(fatal) or self.process.exited_early() is not None):
            code = self.process.exited_early()
            self.process.stop(self.graceful_signal, timeout=5)
            if fatal:
                raise fatal[0]
            reason = (f"exited with code {code} during start" if code is not None
                      else f"not healthy within {self.start_timeout:.0f} s")
            last = tail(self.process.log_file)
            raise StackError(self.name, f"{reason}; last log lines:\n{last}",
                             self.process.log_file)
        self.after_healthy()
        self.started_in = time.monotonic() - self._began

    def stop(self) -> bool:
        return self.process.stop(self.graceful_signal, timeout=self.stop_timeout)

    def status(self, managed: bool) -> ComponentStatus:
        pid = self.process.pid() if managed else None
        if managed and pid is None:
            return ComponentStatus(self.name, "stopped", self.address(), "-", None, None)
        ok = self._safe_healthy()
        if managed:
            state = "healthy" if ok else "unhealthy"
        else:
            state = "reachable" if ok else "unreachable"
        version = self._safe_version() if ok else "-"
        uptime = self.process.uptime_seconds() if managed else None
        return ComponentStatus(self.name, state, self.address(), version, uptime, pid)

    def _safe_healthy(self) -> bool:
        try:
            return self.healthy()
        except Exception:
            return False

    def _safe_version(self) -> str:
        try:
            return self.version()
        except Exception:
            return "?"




def _groups(components: list[Component]) -> list[list[Component]]:
    """Consecutive components of one start_group together, every other one alone."""
    groups: list[list[Component]] = []
    for component in components:
        if (groups and component.start_group is not None
                and groups[-1][0].start_group == component.start_group):
            groups[-1].append(component)
        else:
            groups.append([component])
    return groups


def start_components(components: list[Component], report: Report) -> list[Component]:
    """Start what is not healthy, in order; on any failure stop what this call started.
    A group is launched as a whole before any member is awaited: the first node of a
    three-voter KRaft quorum cannot answer until a second one runs."""
    started: list[Component] = []
    try:
        for group in _groups(components):
            launched: list[Component] = []
            for component in group:
                if component.process.is_running():
                    if component._safe_healthy():
                        report(f"{component.name}: already healthy, left alone")
                        continue
                    report(f"{component.name}: running but unhealthy, restarting")
                    component.stop()
                report(f"{component.name}: starting on {component.address()}")
                started.append(component)
                component.launch()
                launched.append(component)
            for component in launched:
                component.wait_healthy()
                for note in component.notes:
                    report(f"{component.name}: {note}")
                report(f"{component.name}: healthy in {component.started_in:.1f} s")
    except BaseException:
        for component in reversed(started):
            report(f"{component.name}: stopping (start of the stack failed)")
            component.stop()
        raise
    return started


def stop_components(components: list[Component], report: Report) -> list[str]:
    """Stop in reverse order; a group's members at once (the last node of a quorum stopped
    alone would wait for a controller that is gone). Returns the names that were running."""
    stopped: list[str] = []
    for group in reversed(_groups(components)):
        members = list(reversed(group))
        with ThreadPoolExecutor(max_workers=len(members)) as pool:
            results = list(pool.map(lambda component: component.stop(), members))
        for component, was_running in zip(members, results, strict=True):
            if was_running:
                report(f"{component.name}: stopped")
                stopped.append(component.name)
    return stopped
