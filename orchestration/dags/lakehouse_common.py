"""What every DAG of the project shares: how a task calls a `lakehouse` command, the
retry policy from the settings, and the scraper source files (read here, not copied).

Runs inside Airflow's own virtualenv, which has none of the project's packages: only the
standard library and PyYAML. The project's processes pass the resolved settings in the
environment (infra/airflow_env.py); the defaults below are for a bare `airflow` run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from airflow.providers.standard.operators.bash import BashOperator

PROJECT_DIR = Path(__file__).resolve().parents[2]
# The project's interpreter; `-m cli.main` from the project folder runs this checkout's
# code, exactly as `lakehouse ...` would.
PYTHON = PROJECT_DIR / ".venv" / "bin" / "python"
START = datetime(2026, 1, 1, tzinfo=UTC)  # fixed and past: with catchup off, only "now" runs


def default_args() -> dict[str, Any]:
    """Task defaults: retries and their delay from the settings airflow.retries and
    airflow.retry_delay_seconds (LAKEHOUSE_AIRFLOW__* in the environment)."""
    return {
        "owner": "lakehouse",
        "retries": int(os.environ.get("LAKEHOUSE_AIRFLOW__RETRIES", "2")),
        "retry_delay": timedelta(
            seconds=int(os.environ.get("LAKEHOUSE_AIRFLOW__RETRY_DELAY_SECONDS", "60"))),
    }


def lakehouse_task(task_id: str, arguments: str, **kwargs: Any) -> BashOperator:
    """A task that runs `lakehouse <arguments>`; its exit code is the task's outcome
    (1 failed, 2 bad configuration, 3 refused: all fail the task)."""
    return BashOperator(task_id=task_id, bash_command=f"{PYTHON} -m cli.main {arguments}",
                        cwd=str(PROJECT_DIR), **kwargs)


@dataclass(frozen=True)
class ScrapeSource:
    name: str  # the file name without .yaml, as `lakehouse scrape --source` takes it
    path: Path
    interval: timedelta
    description: str


def sources_dir() -> Path:
    """scraper.sources_dir, as the project passes it (absolute), else the default."""
    configured = os.environ.get("LAKEHOUSE_SCRAPER__SOURCES_DIR", "connectors/sources")
    folder = Path(configured)
    return folder if folder.is_absolute() else PROJECT_DIR / folder


def scrape_sources() -> list[ScrapeSource]:
    """The enabled source files with their interval. Only the fields a schedule needs are
    read here; `lakehouse scrape` validates the whole file when the task runs."""
    found = []
    folder = sources_dir()
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        document = yaml.safe_load(path.read_text()) or {}
        if not document.get("enabled", True):
            continue
        found.append(ScrapeSource(path.stem, path,
                                  timedelta(seconds=float(document["interval_seconds"])),
                                  str(document.get("description", ""))))
    return found
