"""Running the dbt project in this process (dbtRunner), on the SparkSession where the
lakehouse tables are registered as views: dbt-spark's `session` method picks up the active
session, so models and tests see the views (delta-spark reads and writes the tables).

The profile is written from the project configuration into the state folder before every
run; dbt's target and logs go there too (one per config profile).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analysis.dbt_lakehouse_models import VIEW_SCHEMA, write_lakehouse_project_files
from connectors.connect_config import ConnectorFileError
from connectors.scrapers.source_config import SourceConfigError
from lakehouse.storage import spark_uri
from settings import ConfigError, Settings

DBT_PROFILE_NAME = "lakehouse"  # `profile:` in dbt/dbt_project.yml


class TransformError(RuntimeError):
    """A dbt command failed; the message names the failing nodes."""


@dataclass(frozen=True)
class DbtPaths:
    project_dir: Path
    profiles_dir: Path
    target_dir: Path
    log_dir: Path

    @classmethod
    def of(cls, settings: Settings) -> DbtPaths:
        state = settings.state_path / "dbt"
        return cls(project_dir=settings.project_path(settings.analysis.dbt_project_dir),
                   profiles_dir=state, target_dir=state / "target", log_dir=state / "logs")


@dataclass
class DbtOutcome:
    command: str
    success: bool
    failures: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _session_parameters(settings: Settings) -> dict[str, str]:
    """Spark SQL settings dbt-spark applies to the session (runtime ones only: the session
    itself is built by spark_streaming.session from the same configuration)."""
    return {"spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions)}


def write_profile(settings: Settings, paths: DbtPaths) -> Path:
    profile = {DBT_PROFILE_NAME: {"target": settings.profile, "outputs": {settings.profile: {
        "type": "spark", "method": "session", "host": "NA", "schema": VIEW_SCHEMA,
        "server_side_parameters": _session_parameters(settings),
    }}}}
    paths.profiles_dir.mkdir(parents=True, exist_ok=True)
    path = paths.profiles_dir / "profiles.yml"
    path.write_text("# Written by `lakehouse transform` from lakehouse.yaml: edit that.\n"
                    + yaml.safe_dump(profile, sort_keys=False))
    return path


def project_vars(settings: Settings) -> dict[str, Any]:
    return {"lakehouse_tables_uri": spark_uri(settings.tables_uri)}


def prepare_project(settings: Settings) -> DbtPaths:
    """Generate models/lakehouse and the profile; returns the paths to run dbt with."""
    paths = DbtPaths.of(settings)
    if not (paths.project_dir / "dbt_project.yml").is_file():
        raise TransformError(f"{paths.project_dir}: no dbt_project.yml (setting "
                             "analysis.dbt_project_dir in lakehouse.yaml)")
    try:
        write_lakehouse_project_files(settings, paths.project_dir)
    except (ConfigError, SourceConfigError, ConnectorFileError) as exc:
        raise TransformError(f"cannot generate the dbt models of the lakehouse: {exc}") from exc
    write_profile(settings, paths)
    return paths


def _common_args(settings: Settings, paths: DbtPaths) -> list[str]:
    return ["--project-dir", str(paths.project_dir), "--profiles-dir", str(paths.profiles_dir),
            "--target-path", str(paths.target_dir), "--vars", json.dumps(project_vars(settings))]


def run_dbt(settings: Settings, paths: DbtPaths, command: list[str]) -> DbtOutcome:
    """`dbt <command>` in this process; the caller has built the SparkSession."""
    from dbt.cli.main import dbtRunner

    args = ["--log-path", str(paths.log_dir), "--no-use-colors", *command,
            *_common_args(settings, paths)]
    result = dbtRunner().invoke(args)
    if isinstance(result.exception, KeyboardInterrupt):  # dbt catches BaseException
        raise result.exception
    outcome = DbtOutcome(command=" ".join(command), success=bool(result.success))
    results = getattr(result.result, "results", None) or []
    for item in results:
        status = str(getattr(item, "status", "")).lower()
        outcome.counts[status] = outcome.counts.get(status, 0) + 1
        if status in ("error", "fail", "runtime error"):
            node = getattr(item, "node", None)
            name = getattr(node, "name", None) or getattr(item, "unique_id", "?")
            message = (getattr(item, "message", "") or "").strip().splitlines()
            outcome.failures.append(f"{name}: {message[0] if message else status}")
    if result.exception is not None:
        outcome.failures.append(f"dbt {command[0]}: {result.exception}")
    return outcome
