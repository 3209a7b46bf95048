"""Running the dbt project in this process (dbtRunner) with the committed profile's
`session` target: dbt-spark picks up the SparkSession this process built from
lakehouse.yaml, whose catalog is the shared Hive metastore, so models read the lakehouse
tables by name and write the marts as Delta catalog tables.

dbt's target and logs go to the state folder (one per config profile), so
`lakehouse transform` and a plain `dbt build` in dbt/ do not overwrite each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from analysis.dbt_lakehouse_models import write_lakehouse_project_files
from connectors.connect_config import ConnectorFileError
from connectors.scrapers.source_config import SourceConfigError
from settings import ConfigError, Settings

# dbt/profiles.yml's target for dbt inside a process that built its own SparkSession
SESSION_TARGET = "session"


class TransformError(RuntimeError):
    """A dbt command failed; the message names the failing nodes."""


@dataclass(frozen=True)
class DbtPaths:
    project_dir: Path
    profiles_dir: Path
    target_dir: Path
    log_dir: Path
    changed: tuple[Path, ...] = ()  # generated files prepare_project rewrote

    @classmethod
    def of(cls, settings: Settings) -> DbtPaths:
        state = settings.state_path / "dbt"
        project_dir = settings.project_path(settings.analysis.dbt_project_dir)
        return cls(project_dir=project_dir, profiles_dir=project_dir,
                   target_dir=state / "target", log_dir=state / "logs")


@dataclass
class DbtOutcome:
    command: str
    success: bool
    failures: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def prepare_project(settings: Settings) -> DbtPaths:
    """Generate models/lakehouse; returns the paths to run dbt with."""
    paths = DbtPaths.of(settings)
    if not (paths.project_dir / "dbt_project.yml").is_file():
        raise TransformError(f"{paths.project_dir}: no dbt_project.yml (setting "
                             "analysis.dbt_project_dir in lakehouse.yaml)")
    try:
        changed = write_lakehouse_project_files(settings, paths.project_dir)
    except (ConfigError, SourceConfigError, ConnectorFileError) as exc:
        raise TransformError(f"cannot generate the dbt models of the lakehouse: {exc}") from exc
    return replace(paths, changed=tuple(changed))


def _common_args(paths: DbtPaths) -> list[str]:
    return ["--project-dir", str(paths.project_dir), "--profiles-dir", str(paths.profiles_dir),
            "--target", SESSION_TARGET, "--target-path", str(paths.target_dir)]


def run_dbt(paths: DbtPaths, command: list[str]) -> DbtOutcome:
    """`dbt <command>` in this process; the caller has built the SparkSession."""
    from dbt.cli.main import dbtRunner

    # dbt's own lines go to its log file only; the caller reports the counts and failures
    args = ["--log-path", str(paths.log_dir), "--no-use-colors", "--quiet", *command,
            *_common_args(paths)]
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
