"""Where things live: the state folder (data, logs, PIDs) and the tools folder (binaries)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StateLayout:
    root: Path
    tools: Path

    @property
    def bin(self) -> Path:
        return self.tools / "bin"

    @property
    def jvm(self) -> Path:
        """Class-path folders resolved by Maven from infra/jvm/pom.xml, one per module."""
        return self.tools / "jvm"

    def jvm_module(self, module: str) -> Path:
        return self.jvm / module

    @property
    def downloads(self) -> Path:
        return self.tools / "downloads"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def run(self) -> Path:
        """Generated configuration files and sockets."""
        return self.root / "run"

    @property
    def install_record(self) -> Path:
        return self.tools / "installed.json"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pid_file(self, component: str) -> Path:
        return self.pids / f"{component}.pid"

    def ensure(self) -> None:
        for folder in (self.bin, self.downloads, self.logs, self.pids,
                       self.data, self.run):
            folder.mkdir(parents=True, exist_ok=True)
