"""Silver pipeline specs: one YAML file per silver table under spark_streaming/silver/pipelines/.

A spec says how bronze records of one entity become rows of its silver table: the message
format, the message fields and their types (the contract), Spark SQL expressions for the
derived columns, the write mode, the quarantine table, the expectation suite and the
lateness bound. Adding an entity is a new spec file (plus its table definitions and suite),
not new code. Loading validates each spec against the table definitions and names the file
and field of every problem.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakehouse.definitions import TableDefinition, load_definitions
from settings import ConfigError

PIPELINES_DIR = Path(__file__).resolve().parent / "pipelines"
EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"
FIELD_TYPES = ("string", "int", "long", "double", "boolean", "epoch_seconds", "timestamp",
               "debezium_timestamp")
_INTERVAL = re.compile(r"^\d+ (second|minute|hour|day)s?$")
# Size limits of the input (UTF-8 bytes), overridable per spec. A string field: the longest
# legitimate values of the contracts are names and addresses, well under 200 bytes; 4 KiB
# leaves room for any real one while a runaway value (a 5 MB "name") goes to quarantine
# instead of into Parquet pages, dictionaries and every downstream copy. A whole record:
# 1 MiB, Kafka's default maximum message size. VARIANT values are limited to 16 MiB.
MAX_FIELD_BYTES = 4096
MAX_RECORD_BYTES = 1024 * 1024
_SIZE_CEILING = 16 * 1024 * 1024

# Columns every pipeline fills from the bronze record, and those each mode computes.
COORDINATE_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "ingested_at")
MODE_COLUMNS = {
    "dedupe_append": (),
    "scd2": ("attributes_hash", "valid_from", "valid_to", "is_current"),
    "cdc_merge": ("is_deleted", "source_op", "source_lsn", "source_ts_ms", "applied_at"),
}


class SpecError(ConfigError):
    """A pipeline spec that cannot be used; every problem names its file and field."""


class PipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str = Field(pattern=r"^silver_[a-z0-9_]+$")
    mode: Literal["dedupe_append", "scd2", "cdc_merge"]
    # json: the value is the message; debezium: a change-event envelope; csv: one CSV line,
    # its columns in the order of `fields`
    format: Literal["json", "debezium", "csv"] = "json"
    quarantine: str = Field(pattern=r"^quarantine_[a-z0-9_]+$")
    # debezium: the captured table, `schema.table` as in the envelope's source block. An
    # event of any other table (a misrouted topic, a forged record) goes to quarantine
    # instead of being merged, where its LSN would shadow later real changes of the key.
    source_table: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")
    # expectations/<suite>.json (default: the table name), or a path to a .json file
    suite: str | None = None
    # Message fields outside `fields`: quarantine the record (stage schema) or ignore them.
    unknown_fields: Literal["quarantine", "ignore"] = "quarantine"
    fields: dict[str, str] = Field(min_length=1)
    # Longest string value of a field, and longest record value, in UTF-8 bytes; beyond:
    # quarantine naming the field (or `value`), the size and the maximum.
    max_field_bytes: int = Field(default=MAX_FIELD_BYTES, ge=1, le=_SIZE_CEILING)
    max_record_bytes: int = Field(default=MAX_RECORD_BYTES, ge=1, le=_SIZE_CEILING)
    # silver column -> Spark SQL expression over the typed fields (default: same-named field)
    columns: dict[str, str] = Field(default_factory=dict)
    # the key of one entity (scd2, cdc_merge); dedupe_append uses the table's unique_key
    key: list[str] = Field(default_factory=list)
    tracked: list[str] = Field(default_factory=list)  # scd2: attributes that open a version
    order_by: str | None = None  # scd2: the column ordering versions
    # Lateness bound: a record whose event_time is older than its Kafka timestamp minus
    # late_after goes to quarantine (rule `late_beyond_watermark`) instead of silver.
    event_time: str | None = None
    late_after: str | None = None
    description: str = ""

    @property
    def suite_name(self) -> str:
        return self.suite or self.table

    @property
    def suite_path(self) -> Path:
        if self.suite_name.endswith(".json"):
            return EXPECTATIONS_DIR / self.suite_name  # an absolute path stays as it is
        return EXPECTATIONS_DIR / f"{self.suite_name}.json"


def _check(spec: PipelineSpec, definitions: dict[str, TableDefinition]) -> list[str]:
    problems = []
    table = definitions.get(spec.table)
    if table is None or table.layer != "silver":
        return [f"table: no silver table definition named {spec.table!r}"]
    quarantine = definitions.get(spec.quarantine)
    if quarantine is None or quarantine.layer != "quarantine":
        problems.append(f"quarantine: no quarantine table definition named {spec.quarantine!r}")
    if not table.source or len(table.source.tables) != 1:
        problems.append(f"table: {spec.table}'s definition must name exactly one bronze "
                        "table in source.tables")
    if spec.max_field_bytes > spec.max_record_bytes:
        problems.append(f"max_field_bytes: {spec.max_field_bytes} is more than "
                        f"max_record_bytes ({spec.max_record_bytes})")
    for name, kind in spec.fields.items():
        if "'" in name:
            problems.append(f"fields.{name}: a field name cannot contain a quote")
        if name.startswith("_"):
            problems.append(f"fields.{name}: a field name cannot start with '_' (the "
                            "pipeline's own columns do)")
        if kind not in FIELD_TYPES:
            problems.append(f"fields.{name}: unknown type {kind!r} (known: "
                            f"{', '.join(FIELD_TYPES)})")
    columns = {c.name for c in table.columns}
    provided = set(COORDINATE_COLUMNS) | set(MODE_COLUMNS[spec.mode])
    for name in spec.columns:
        if name not in columns:
            problems.append(f"columns.{name}: {spec.table} has no column {name!r}")
        if name in provided:
            problems.append(f"columns.{name}: filled by the pipeline ({spec.mode}), not the spec")
    for column in columns - provided - set(spec.columns) - set(spec.fields):
        problems.append(f"columns: {spec.table}.{column} has no source - add a field or a "
                        "columns expression")
    if spec.mode in ("scd2", "cdc_merge") and not spec.key:
        problems.append(f"key: required for mode {spec.mode}")
    if spec.mode == "scd2":
        if not spec.tracked:
            problems.append("tracked: required for mode scd2")
        if not spec.order_by:
            problems.append("order_by: required for mode scd2")
    if spec.mode == "dedupe_append" and not table.unique_key:
        problems.append(f"mode: dedupe_append needs unique_key in {spec.table}'s definition")
    for field in ("key", "tracked"):
        unknown = [c for c in getattr(spec, field) if c not in columns]
        if unknown:
            problems.append(f"{field}: no column {unknown} in {spec.table}")
    if (spec.event_time is None) != (spec.late_after is None):
        problems.append("late_after: give event_time and late_after together")
    if spec.late_after and not _INTERVAL.match(spec.late_after):
        problems.append(f"late_after: {spec.late_after!r} is not '<n> <unit>' "
                        "(second, minute, hour, day)")
    if spec.event_time and spec.event_time not in columns:
        problems.append(f"event_time: no column {spec.event_time!r} in {spec.table}")
    if spec.format == "debezium" and spec.mode != "cdc_merge":
        problems.append("format: debezium change events are applied with mode cdc_merge")
    if spec.format == "debezium" and spec.source_table is None:
        problems.append("source_table: required for format debezium: the captured table as "
                        "schema.table, e.g. public.rentals")
    if spec.format != "debezium" and spec.source_table is not None:
        problems.append(f"source_table: only for format debezium, not {spec.format}")
    if not spec.suite_path.is_file():
        problems.append(f"suite: no expectation suite {spec.suite_path}")
    return problems


def load_specs(folder: Path | None = None, tables: list[str] | tuple[str, ...] = ()
               ) -> list[PipelineSpec]:
    """Every spec under `folder` (default: the pipelines folder), validated; with `tables`,
    only those silver tables (unknown names are errors)."""
    folder = folder or PIPELINES_DIR
    definitions = {d.name: d for d in load_definitions()}
    problems: list[str] = []
    specs: dict[str, PipelineSpec] = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
            spec = PipelineSpec.model_validate(data)
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{path}: cannot read YAML: {exc}")
            continue
        except ValidationError as exc:
            problems.extend(f"{path}: {'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}"
                            for e in exc.errors())
            continue
        if path.stem != spec.table:
            problems.append(f"{path}: table: {spec.table!r} differs from the file name")
        problems.extend(f"{path}: {p}" for p in _check(spec, definitions))
        specs[spec.table] = spec
    unknown = [t for t in tables if t not in specs]
    if unknown:
        problems.append(f"--table: no silver pipeline for {unknown} (known: "
                        f"{', '.join(sorted(specs))})")
    if problems:
        raise SpecError("invalid silver pipeline specs:\n" + "\n".join(f"  {p}" for p in problems))
    return [specs[t] for t in tables] if tables else list(specs.values())
