"""The feed simulator (GBFS 3.0/2.3 and Open-Meteo on loopback) as a server of the
embedded stack: `up` starts it, `status` shows it, `down` stops it and a running ingest
starts it again when it dies, so the scrapers and Airflow's scrape DAGs always have their
feeds, whoever runs them. `embedded.simulator` (default true) says whether it is wanted.

It runs `python -m connectors.simulator` as its own process.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import requests

from infra.components.base import Component, Port

# Seconds of wall time per simulated tick: statuses change about as often as a real
# system's feeds do (their ttl is 30-60 s).
TICK_SECONDS = 30.0


class FeedSimulatorServer(Component):
    name = "simulator"
    marker = "connectors.simulator"
    start_timeout = 60.0
    stop_timeout = 10.0

    def wanted(self) -> bool:
        return self.settings.embedded.simulator

    def address(self) -> str:
        return self.settings.simulator.url

    def ports(self) -> list[Port]:
        return [Port("http", self.settings.simulator.port, "LAKEHOUSE_SIMULATOR__PORT")]

    def binaries(self) -> list[Path]:
        return [Path(sys.executable)]

    def working_dir(self) -> Path:
        return self.settings.project_dir

    def command(self) -> list[str]:
        config = self.settings.simulator
        return [sys.executable, "-m", "connectors.simulator", "--host", config.host,
                "--port", str(config.port), "--seed", str(config.seed),
                "--tick-interval", f"{TICK_SECONDS:g}"]

    def healthy(self) -> bool:
        answer = requests.get(f"{self.address()}/control/status", timeout=3)
        return answer.status_code == 200

    def version(self) -> str:
        return importlib.metadata.version("lakehouse-ingest")
