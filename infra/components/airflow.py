"""Airflow 3 as four components of the stack: API server (UI + REST + the tasks' execution
API), scheduler (LocalExecutor), DAG processor and triggerer, all on 127.0.0.1.

Optional like the SQL endpoint (`embedded.airflow`, `up --airflow`); its metadata lives in
a database of the project's PostgreSQL, so PostgreSQL starts first.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import requests
from psycopg import sql

from clients import postgres_connect
from infra import airflow_env
from infra.components.base import Component, Port, StackError
from settings import Settings
from settings.layout import StateLayout

MIGRATE_TIMEOUT = 600.0


def _health(url: str) -> dict:
    """The API server's view of every Airflow process (heartbeats in the database)."""
    answer = requests.get(f"{url}/api/v2/monitor/health", timeout=5)
    answer.raise_for_status()
    return answer.json()


class _AirflowProcess(Component):
    """What the four processes share: the venv, the environment, the health answer."""

    subcommand: str
    start_group = "airflow"
    start_timeout = 180.0  # a cold start imports Airflow in each process on 2 busy cores
    stop_timeout = 30.0
    # Key of this process in the API server's /api/v2/monitor/health answer.
    health_key: str

    def wanted(self) -> bool:
        return self.settings.embedded.airflow

    def address(self) -> str:
        return airflow_env.api_url(self.settings)

    def ports(self) -> list[Port]:
        return []

    def binaries(self) -> list[Path]:
        return [airflow_env.airflow_bin(self.layout)]

    def check_binaries(self) -> None:
        if not airflow_env.airflow_bin(self.layout).exists():
            raise StackError(self.name, f"Airflow is not installed in "
                             f"{airflow_env.venv_dir(self.layout)}; run `make setup`",
                             self.process.log_file)

    def environment(self) -> dict[str, str]:
        try:
            return airflow_env.airflow_environment(self.settings)
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc

    def working_dir(self) -> Path:
        return airflow_env.airflow_home(self.settings)

    def command(self) -> list[str]:
        return [str(airflow_env.airflow_bin(self.layout)), self.subcommand]

    def healthy(self) -> bool:
        part = _health(self.address()).get(self.health_key) or {}
        return part.get("status") == "healthy"

    def version(self) -> str:
        return airflow_env.installed_version(self.layout)


class AirflowApiServer(_AirflowProcess):
    name = "airflow-api-server"
    # "airflow api-server" at launch, "airflow api_server -- ..." once it sets its title
    marker = "airflow api"
    subcommand = "api-server"
    health_key = "metadatabase"

    def ports(self) -> list[Port]:
        return [Port("http", self.settings.embedded.airflow_port,
                     "LAKEHOUSE_EMBEDDED__AIRFLOW_PORT")]

    def command(self) -> list[str]:
        return [*super().command(), "--host", "127.0.0.1",
                "--port", str(self.settings.embedded.airflow_port), "--workers", "1"]

    def prepare(self) -> None:
        """The metadata database (created when missing, then `airflow db migrate`) and the
        UI user's password file; both before any of the four processes starts."""
        airflow_env.airflow_home(self.settings).mkdir(parents=True, exist_ok=True)
        database = self.settings.airflow.database
        with postgres_connect(self.settings, dbname="postgres") as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (database,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                self.notes.append(f"created the metadata database {database!r}")
        try:
            airflow_env.write_passwords_file(self.settings)
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc
        log = self.process.log_file
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write("\n=== airflow db migrate\n")
            out.flush()
            try:
                result = subprocess.run(
                    [str(airflow_env.airflow_bin(self.layout)), "db", "migrate"],
                    env=self.environment(), cwd=self.working_dir(), stdout=out,
                    stderr=subprocess.STDOUT, timeout=MIGRATE_TIMEOUT, check=False)
            except subprocess.TimeoutExpired as exc:
                raise StackError(self.name, f"`airflow db migrate` still running after "
                                 f"{MIGRATE_TIMEOUT:.0f} s", log) from exc
        if result.returncode != 0:
            raise StackError(self.name, f"`airflow db migrate` failed ({result.returncode})",
                             log)


class AirflowScheduler(_AirflowProcess):
    name = "airflow-scheduler"
    marker = "airflow scheduler"
    subcommand = "scheduler"
    health_key = "scheduler"

    def command(self) -> list[str]:
        return [*super().command(), "--skip-serve-logs"]  # its log server binds 0.0.0.0


class AirflowDagProcessor(_AirflowProcess):
    name = "airflow-dag-processor"
    marker = "airflow dag-processor"
    subcommand = "dag-processor"
    health_key = "dag_processor"


class AirflowTriggerer(_AirflowProcess):
    name = "airflow-triggerer"
    marker = "airflow triggerer"
    subcommand = "triggerer"
    health_key = "triggerer"

    def command(self) -> list[str]:
        return [*super().command(), "--skip-serve-logs"]  # its log server binds 0.0.0.0


def airflow_components(settings: Settings, layout: StateLayout) -> list[Component]:
    """API server first: it migrates the metadata database before the others launch."""
    return [cls(settings, layout) for cls in (AirflowApiServer, AirflowScheduler,
                                              AirflowDagProcessor, AirflowTriggerer)]
