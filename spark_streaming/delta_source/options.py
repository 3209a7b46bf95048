"""Options of the lakehouse_delta source, parsed once, with errors that name the option.

Spark hands options over lower-cased (a case-insensitive dict), so option names are looked
up case-insensitively and Delta table properties are mapped back to their canonical case.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TABLE = "table"
PROFILE = "profile"
VERSION_AS_OF = "versionAsOf"
TIMESTAMP_AS_OF = "timestampAsOf"
PARTITION_BY = "partitionBy"
TXN_APP_ID = "txnAppId"
FILES_PER_PARTITION = "filesPerPartition"
MAX_PARTITION_BYTES = "maxPartitionBytes"
SCAN_REGISTRY_DIR = "scanRegistryDir"
FILTERS = "filters"
STARTING_VERSION = "startingVersion"
MAX_FILES_PER_TRIGGER = "maxFilesPerTrigger"
MAX_VERSIONS_PER_TRIGGER = "maxVersionsPerTrigger"
IGNORE_CHANGES = "ignoreChanges"
SKIP_CHANGE_COMMITS = "skipChangeCommits"
CHECKPOINT_LOCATION = "checkpointLocation"
OVERWRITE_SCHEMA = "overwriteSchema"
LATEST = "latest"
PROPERTY_PREFIX = "delta."

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024

# Delta table properties (protocol + delta-rs), to restore the case Spark lowered.
_KNOWN_PROPERTIES = (
    "appendOnly", "autoOptimize.autoCompact", "autoOptimize.optimizeWrite",
    "checkpointInterval", "checkpointPolicy", "checkpoint.writeStatsAsJson",
    "checkpoint.writeStatsAsStruct", "columnMapping.mode",
    "compatibility.symlinkFormatManifest.enabled", "dataSkippingNumIndexedCols",
    "dataSkippingStatsColumns", "deletedFileRetentionDuration", "enableChangeDataFeed",
    "enableDeletionVectors", "enableExpiredLogCleanup", "enableInCommitTimestamps",
    "enableRowTracking", "enableTypeWidening", "isolationLevel", "logRetentionDuration",
    "minReaderVersion", "minWriterVersion", "randomizeFilePrefixes", "randomPrefixLength",
    "setTransactionRetentionDuration", "targetFileSize", "tuneFileSizesForRewrites",
)
_CANONICAL = {f"{PROPERTY_PREFIX}{name}".lower(): f"{PROPERTY_PREFIX}{name}"
              for name in _KNOWN_PROPERTIES}
# Families whose suffix is free text (constraint names, feature names): kept as given.
_FREE_SUFFIX = ("delta.constraints.", "delta.feature.")


class DeltaOptionError(ValueError):
    """An option of the lakehouse_delta source that cannot be used."""


def normalize_table_uri(uri: str) -> str:
    """One spelling per table: s3:// for S3 (s3a:// accepted), absolute paths for local."""
    uri = uri.strip()
    if uri.startswith("s3a://"):
        uri = "s3://" + uri[len("s3a://"):]
    if uri.startswith("s3://"):
        return uri.rstrip("/")
    if "://" in uri and not uri.startswith("file://"):
        raise DeltaOptionError(f"option {TABLE}: unsupported scheme in {uri!r} "
                               "(use a local path or s3://bucket/prefix)")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return str(Path(uri).expanduser().absolute()).rstrip("/") or "/"


def _canonical_property(key: str) -> str:
    lowered = key.lower()
    if lowered in _CANONICAL:
        return _CANONICAL[lowered]
    if lowered.startswith(_FREE_SUFFIX):
        return key
    raise DeltaOptionError(f"option {key}: not a known Delta table property "
                           f"(known: {', '.join(sorted(_CANONICAL.values()))})")


def _positive_int(lowered: Mapping[str, str], name: str) -> int | None:
    raw = lowered.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and name not in (VERSION_AS_OF, STARTING_VERSION)):
        raise DeltaOptionError(f"option {name}: expected a non-negative integer, got {raw!r}")
    return value


def _bool(lowered: Mapping[str, str], name: str) -> bool:
    raw = lowered.get(name.lower(), "false").strip().lower()
    if raw not in ("true", "false"):
        raise DeltaOptionError(f"option {name}: expected true or false, got {raw!r}")
    return raw == "true"


def _starting_version(lowered: Mapping[str, str]) -> int | str | None:
    if lowered.get(STARTING_VERSION.lower(), "").strip().lower() == LATEST:
        return LATEST
    return _positive_int(lowered, STARTING_VERSION)


def _filters(lowered: Mapping[str, str]) -> tuple[tuple[str, str, Any], ...]:
    """The `filters` option: a JSON list of [column, operator, value] triples (ANDed)."""
    raw = lowered.get(FILTERS)
    if raw is None:
        return ()
    shape = ('a JSON list of [column, operator, value] triples, e.g. '
             '[["day", ">=", "2024-03-01"], ["p", "in", ["a", "b"]]]')
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DeltaOptionError(f"option {FILTERS}: expected {shape}; not JSON: {exc}") from exc
    if not isinstance(parsed, list) or not all(
            isinstance(t, list) and len(t) == 3 and isinstance(t[0], str)
            and isinstance(t[1], str) for t in parsed):
        raise DeltaOptionError(f"option {FILTERS}: expected {shape}, got {raw!r}")
    return tuple((column, operator.strip().lower(),
                  tuple(value) if isinstance(value, list) else value)
                 for column, operator, value in parsed)


def parse_timestamp(raw: str, name: str = TIMESTAMP_AS_OF) -> datetime:
    """ISO-8601 / Spark-style timestamp; without a zone it is UTC (the session time zone)."""
    text = raw.strip().replace(" ", "T", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise DeltaOptionError(f"option {name}: not an ISO-8601 timestamp: {raw!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class DeltaOptions:
    table_uri: str
    profile: str | None = None
    version_as_of: int | None = None
    timestamp_as_of: datetime | None = None
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    txn_app_id: str | None = None
    files_per_partition: int | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    scan_registry_dir: str | None = None
    # batch reads: (column, operator, value) triples restricting the relation (reader.py)
    filters: tuple[tuple[str, str, Any], ...] = ()
    # streaming reads
    starting_version: int | str | None = None  # a version, "latest" or None (whole table)
    max_files_per_trigger: int | None = None
    max_versions_per_trigger: int | None = None
    ignore_changes: bool = False
    skip_change_commits: bool = False
    checkpoint_location: str | None = None
    # overwrite writes: replace the table's schema with the incoming one (dbt full rebuilds)
    overwrite_schema: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> DeltaOptions:
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        if "path" in lowered:
            raise DeltaOptionError("option path: Spark swallows it; name the table with "
                                   "the option `table` instead")
        table = lowered.get(TABLE)
        if not table:
            raise DeltaOptionError(f"option {TABLE} is required: a local path or "
                                   "s3://bucket/prefix/name of the Delta table")
        version = _positive_int(lowered, VERSION_AS_OF)
        raw_ts = lowered.get(TIMESTAMP_AS_OF.lower())
        if version is not None and raw_ts is not None:
            raise DeltaOptionError(f"give at most one of {VERSION_AS_OF} and {TIMESTAMP_AS_OF}")
        partition_by = tuple(
            c.strip() for c in lowered.get(PARTITION_BY.lower(), "").split(",") if c.strip()
        )
        properties = {
            _canonical_property(k): v for k, v in options.items()
            if str(k).lower().startswith(PROPERTY_PREFIX)
        }
        max_bytes = _positive_int(lowered, MAX_PARTITION_BYTES)
        ignore_changes = _bool(lowered, IGNORE_CHANGES)
        skip_change_commits = _bool(lowered, SKIP_CHANGE_COMMITS)
        if ignore_changes and skip_change_commits:
            raise DeltaOptionError(f"give at most one of {IGNORE_CHANGES} and "
                                   f"{SKIP_CHANGE_COMMITS}")
        return cls(
            table_uri=normalize_table_uri(table),
            profile=lowered.get(PROFILE) or None,
            version_as_of=version,
            timestamp_as_of=parse_timestamp(raw_ts) if raw_ts is not None else None,
            partition_by=partition_by,
            properties=properties,
            txn_app_id=lowered.get(TXN_APP_ID.lower()) or None,
            files_per_partition=_positive_int(lowered, FILES_PER_PARTITION),
            max_partition_bytes=max_bytes or DEFAULT_MAX_PARTITION_BYTES,
            scan_registry_dir=lowered.get(SCAN_REGISTRY_DIR.lower()) or None,
            filters=_filters(lowered),
            starting_version=_starting_version(lowered),
            max_files_per_trigger=_positive_int(lowered, MAX_FILES_PER_TRIGGER),
            max_versions_per_trigger=_positive_int(lowered, MAX_VERSIONS_PER_TRIGGER),
            ignore_changes=ignore_changes,
            skip_change_commits=skip_change_commits,
            checkpoint_location=lowered.get(CHECKPOINT_LOCATION.lower()) or None,
            overwrite_schema=_bool(lowered, OVERWRITE_SCHEMA),
        )

    @property
    def time_travel(self) -> bool:
        return self.version_as_of is not None or self.timestamp_as_of is not None

    def storage_options(self) -> dict[str, str]:
        """delta-rs storage options from the project configuration (profile option, else
        LAKEHOUSE_PROFILE, else the default profile): credentials never come from options."""
        # imported here: executors get resolved options and need not load the config
        from lakehouse.storage import storage_options
        from settings import load_settings

        return storage_options(load_settings(self.profile), self.table_uri)
