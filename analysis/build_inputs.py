"""What a dbt build read and wrote, so that a transform with nothing new can say so in
seconds instead of starting Spark and rebuilding the same marts.

The inputs of a build are the dbt project's files (the generated sources included), the
dbt arguments, and every table of the shared catalog at its Delta version (the lakehouse
tables it reads and the marts and snapshots it writes). After a successful build their
state is recorded; a later transform whose state is the same has nothing to do, because
every model is a function of those inputs (no model reads the clock). Any commit to any
table (an ingest batch, a RESTORE, another `dbt build`), a changed model or other
arguments make the state differ, and the build runs.

Versions come from the Delta logs through delta-rs and the catalog from the metastore
tables (lakehouse.catalog), so the check needs neither Spark nor dbt.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from lakehouse.catalog import registered_tables
from lakehouse.storage import storage_options
from settings import Settings

# dbt's own output folders and per-user files are not inputs of a build.
_NOT_INPUTS = {"target", "logs", "dbt_packages", ".user.yml"}
_PERIOD = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1),
           "day": timedelta(days=1)}


@dataclass(frozen=True)
class BuildInputs:
    """The state a build ran over: equal states give equal builds."""

    arguments: str
    catalog: str  # the metastore: PostgreSQL host:port/database
    project_digest: str
    table_versions: dict[str, str]  # catalog name -> "location@Delta version" (a view: "")

    def describe(self) -> str:
        tables = sum("@" in v for v in self.table_versions.values())
        return f"{tables} catalog tables at the same Delta versions, dbt project unchanged"


def project_digest(project_dir: Path) -> str:
    """sha256 over the dbt project's files, names included (a renamed model is a change)."""
    digest = hashlib.sha256()
    for path in sorted(project_dir.rglob("*")):
        relative = path.relative_to(project_dir)
        if not path.is_file() or relative.parts[0] in _NOT_INPUTS:
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _delta_version(settings: Settings, location: str | None) -> str:
    if not location or "://" not in location:
        return ""  # a view, or a table outside the lakehouse storage
    try:
        version = DeltaTable(location, storage_options=storage_options(settings, location),
                             without_files=True).version()
    except TableNotFoundError:
        return location
    return f"{location}@{version}"


def current_inputs(settings: Settings, project_dir: Path, arguments: list[str]) -> BuildInputs:
    tables = registered_tables(settings)
    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = pool.map(lambda location: _delta_version(settings, location),
                            tables.values())
        table_versions = dict(zip(tables, versions, strict=True))
    pg = settings.postgres
    return BuildInputs(arguments=json.dumps(arguments),
                       catalog=f"{pg.host}:{pg.port}/{pg.metastore_database}",
                       project_digest=project_digest(project_dir),
                       table_versions=dict(sorted(table_versions.items())))


@dataclass(frozen=True)
class LastBuild:
    inputs: BuildInputs
    finished_at: str  # ISO time, UTC
    docs: bool  # whether the docs site was generated from this state
    freshness: bool  # whether target/sources.json is dbt's freshness result of this state


class BuildRecord:
    """The last successful build per argument list, in one JSON file of the state folder."""

    def __init__(self, path: Path):
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}  # never built here, or a torn file: build

    def last(self, arguments: str) -> LastBuild | None:
        entry = self._read().get(arguments)
        if not entry:
            return None
        try:
            return LastBuild(inputs=BuildInputs(**entry["inputs"]),
                             finished_at=entry["finished_at"], docs=entry["docs"],
                             freshness=entry.get("freshness", False))
        except (KeyError, TypeError):
            return None

    def record(self, inputs: BuildInputs, *, docs: bool, freshness: bool) -> None:
        entries = self._read()
        entries[inputs.arguments] = {"inputs": asdict(inputs), "docs": docs,
                                     "freshness": freshness,
                                     "finished_at": datetime.now(UTC).isoformat()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(entries, indent=1))
        partial.replace(self.path)

    def forget(self) -> None:
        """A failed or interrupted build: the next transform builds whatever it finds."""
        self.path.unlink(missing_ok=True)


def freshness_now(sources_json: Path, now: datetime | None = None) -> dict[str, list[str]]:
    """Source freshness of the last `dbt source freshness` re-judged at `now`, for sources
    whose tables have not changed since: their newest record (`max_loaded_at`) is the same,
    only its age grew. Judged by the criteria dbt recorded with each result. Returns the
    source names per status (pass, warn, error); empty when there is no earlier result."""
    try:
        results = json.loads(sources_json.read_text())["results"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return {}
    now = now or datetime.now(UTC)
    statuses: dict[str, list[str]] = {}
    for result in results:
        name = ".".join(result["unique_id"].split(".")[-2:])
        ago = result.get("max_loaded_at_time_ago_in_s")
        if ago is None or not result.get("snapshotted_at"):
            statuses.setdefault(result.get("status", "error"), []).append(name)
            continue
        age = timedelta(seconds=ago) + (now - _utc(result["snapshotted_at"]))
        status = "pass"
        for level in ("warn", "error"):
            limit = (result.get("criteria") or {}).get(f"{level}_after") or {}
            if limit.get("count") and age > limit["count"] * _PERIOD[limit["period"]]:
                status = level
        statuses.setdefault(status, []).append(name)
    return statuses


def _utc(text: str) -> datetime:
    """dbt writes its clock's times in UTC, with or without the offset."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
