"""Table definitions: one YAML file per Delta table under lakehouse/tables/<layer>/<name>.yaml.
Bronze and quarantine tables, of a standard shape, name their shape and what differs
(`lakehouse/table_shapes.py`).

A definition is the single source of truth for a table's columns (type, NOT NULL,
description), partitioning, Delta table properties, CHECK constraints, Z-order columns and
where its rows come from. Loading validates every file and reports every problem at once,
each naming the file and the field, before anything touches a table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from deltalake import Schema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from lakehouse import column_types
from lakehouse.constraint_check import ConstraintError, check_constraints
from lakehouse.table_shapes import ShapeError, expand
from settings import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFINITIONS_DIR = Path(__file__).resolve().parent / "tables"
LAYERS = ("bronze", "silver", "quarantine", "gold", "quality")
Layer = Literal["bronze", "silver", "quarantine", "gold", "quality"]
_IDENTIFIER = r"^[a-z_][a-z0-9_]*$"
_INTERVAL = re.compile(r"^interval \d+ (second|minute|hour|day|week)s?$")

# Delta table properties a definition may set, with the check of their value.
_BOOLEAN = ("true", "false")


def _is_interval(value: str) -> bool:
    return bool(_INTERVAL.match(value))


def _is_int(minimum: int) -> Any:
    return lambda value: value.lstrip("-").isdigit() and int(value) >= minimum


PROPERTY_CHECKS: dict[str, tuple[Any, str]] = {
    "delta.appendOnly": (lambda v: v in _BOOLEAN, "true or false"),
    "delta.enableChangeDataFeed": (lambda v: v in _BOOLEAN, "true or false"),
    "delta.enableExpiredLogCleanup": (lambda v: v in _BOOLEAN, "true or false"),
    "delta.logRetentionDuration": (_is_interval, "'interval <n> <unit>', e.g. 'interval 30 days'"),
    "delta.deletedFileRetentionDuration": (_is_interval,
                                           "'interval <n> <unit>', e.g. 'interval 7 days'"),
    "delta.checkpointInterval": (_is_int(1), "an integer >= 1"),
    "delta.dataSkippingNumIndexedCols": (_is_int(-1), "an integer >= -1 (-1: all columns)"),
    "delta.targetFileSize": (_is_int(1), "a size in bytes >= 1"),
}
REQUIRED_PROPERTIES = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration",
                       "delta.checkpointInterval", "delta.dataSkippingNumIndexedCols")
# What each layer's tables must declare, and why.
LAYER_PROPERTIES = {
    "bronze": ({"delta.appendOnly": "true"}, "bronze keeps every record as received"),
    "silver": ({"delta.enableChangeDataFeed": "true"},
               "gold and downstream readers consume silver's change feed"),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ColumnDefinition(_Strict):
    name: str = Field(pattern=_IDENTIFIER)
    type: str
    nullable: bool = True
    description: str = Field(min_length=1)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        try:
            return column_types.canonical(value)
        except column_types.ColumnTypeError as exc:
            raise ValueError(str(exc)) from None

    def delta_field(self) -> dict[str, Any]:
        return {"name": self.name, "type": column_types.to_delta(self.type),
                "nullable": self.nullable, "metadata": {"comment": self.description}}

    def ddl(self, spark: SparkSession) -> str:
        """The column in Spark SQL DDL (`name` TYPE [NOT NULL] COMMENT '...'), rendered by
        Spark itself from the Delta field, so every type spells as Spark parses it."""
        schema = json.dumps({"type": "struct", "fields": [self.delta_field()]})
        types = spark._jvm.org.apache.spark.sql.types  # type: ignore[union-attr]
        return str(types.DataType.fromJson(schema).toDDL())


class FreshnessDefinition(_Strict):
    """How old the newest record of a bronze table's topic may be before `dbt source
    freshness` (run by `lakehouse transform`) warns or fails; None: never."""

    warn_after_hours: int | None = Field(default=1, ge=1)
    error_after_hours: int | None = Field(default=24, ge=1)
    # A table that never received a record, because its feed never ran (no trip file
    # dropped yet): "error" judges it stale like any other, "skip" reports it as having no
    # data and leaves it out of the check until its first record lands.
    when_empty: Literal["error", "skip"] = "error"


class SourceDefinition(_Strict):
    """Where a table's rows come from (documentation for readers and the pipeline)."""

    # The Kafka topic as connectors/topics/ names it, without the profile's
    # kafka.topic_prefix (bronze: the topic the table stores; the jobs add the prefix).
    topic: str | None = None
    tables: list[str] = Field(default_factory=list)
    format: str | None = None
    notes: str | None = None
    # bronze tables of a topic: the topic's source freshness (defaults when left out)
    freshness: FreshnessDefinition = Field(default_factory=FreshnessDefinition)


class TableDefinition(_Strict):
    name: str = Field(pattern=_IDENTIFIER)
    layer: Layer
    description: str = Field(min_length=1)
    columns: list[ColumnDefinition] = Field(min_length=1)
    partition_by: list[str] = Field(default_factory=list)
    properties: dict[str, str] = Field(default_factory=dict)
    constraints: dict[str, str] = Field(default_factory=dict)
    zorder_by: list[str] = Field(default_factory=list)
    # The columns identifying one row (dedupe / merge key of the pipeline); informational.
    unique_key: list[str] = Field(default_factory=list)
    source: SourceDefinition | None = None

    @field_validator("properties", mode="before")
    @classmethod
    def _as_strings(cls, value: Any) -> Any:
        """YAML gives `true` and `10`; Delta properties are strings ("true", "10")."""
        if isinstance(value, dict):
            return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value

    @field_validator("properties")
    @classmethod
    def _known_properties(cls, value: dict[str, str]) -> dict[str, str]:
        for key, setting in value.items():
            if key.startswith("delta.constraints."):
                raise ValueError(f"{key}: declare CHECK constraints under `constraints`")
            if key not in PROPERTY_CHECKS:
                raise ValueError(f"{key}: unknown or unmanaged property (known: "
                                 f"{', '.join(PROPERTY_CHECKS)})")
            check, expected = PROPERTY_CHECKS[key]
            if not check(setting):
                raise ValueError(f"{key}: {setting!r} is not {expected}")
        missing = [key for key in REQUIRED_PROPERTIES if key not in value]
        if missing:
            raise ValueError(f"every table must set {', '.join(missing)}")
        return value

    @field_validator("constraints")
    @classmethod
    def _constraint_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, expression in value.items():
            if not re.match(_IDENTIFIER, name):
                raise ValueError(f"{name}: constraint names are lower_snake_case")
            if not str(expression).strip():
                raise ValueError(f"{name}: empty expression")
        return value

    def _zorder_without_statistics(self) -> list[str]:
        """The `zorder_by` columns outside Delta's statistics columns: the first
        `delta.dataSkippingNumIndexedCols` columns that are not partition columns (unless
        `delta.dataSkippingStatsColumns` names them instead)."""
        indexed = self.properties.get("delta.dataSkippingNumIndexedCols", "32")
        if ("delta.dataSkippingStatsColumns" in self.properties
                or not indexed.lstrip("-").isdigit() or int(indexed) < 0):
            return []
        counted = [c.name for c in self.columns if c.name not in self.partition_by]
        return [c for c in self.zorder_by if c not in counted[:int(indexed)]]

    @model_validator(mode="after")
    def _consistent(self) -> TableDefinition:
        names = [c.name for c in self.columns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"columns: {repeated} defined more than once")
        if not self.name.startswith(f"{self.layer}_"):
            raise ValueError(f"name: a {self.layer} table's name starts with '{self.layer}_'")
        for field in ("partition_by", "zorder_by", "unique_key"):
            unknown = [c for c in getattr(self, field) if c not in names]
            if unknown:
                raise ValueError(f"{field}: no column {unknown} in columns")
        by_name = {c.name: c for c in self.columns}
        for column in self.partition_by:
            if by_name[column].type not in ("string", "long", "int", "short", "byte", "date",
                                            "boolean", "timestamp"):
                raise ValueError(f"partition_by: {column} has type {by_name[column].type}, "
                                 "which cannot be a partition column")
        if len(self.partition_by) == len(self.columns):
            raise ValueError("partition_by: at least one column must not be a partition column")
        in_partition = [c for c in self.zorder_by if c in self.partition_by]
        if in_partition:
            raise ValueError(f"zorder_by: {in_partition} are partition columns (Z-order "
                             "works inside a partition)")
        unindexed = self._zorder_without_statistics()
        if unindexed:
            raise ValueError(f"zorder_by: {unindexed} get no file statistics (only the first "
                             f"{self.properties['delta.dataSkippingNumIndexedCols']} columns "
                             "that are not partition columns do): Delta refuses to Z-order "
                             "on them, and they could not skip files anyway")
        required, why = LAYER_PROPERTIES.get(self.layer, ({}, ""))
        for key, setting in required.items():
            if self.properties.get(key) != setting:
                raise ValueError(f"properties: {self.layer} tables must set {key}: "
                                 f"{setting} ({why})")
        if (self.layer != "bronze" and self.source is not None
                and "freshness" in self.source.model_fields_set):
            raise ValueError("source.freshness: only a bronze table (a topic as landed) "
                             "declares source freshness")
        if self.layer == "bronze" and self.constraints:
            raise ValueError("constraints: bronze tables take no CHECK constraints (they keep "
                             "every record; the Spark bronze writer refuses constrained tables)")
        return self

    def delta_schema(self) -> Schema:
        fields = [c.delta_field() for c in self.columns]
        return Schema.from_json(json.dumps({"type": "struct", "fields": fields}))

    @property
    def stored_constraints(self) -> dict[str, str]:
        """Constraint name -> expression as the Delta log will hold it (delta-spark keeps
        the text between `CHECK (` and `)` as written)."""
        return {name: expression.strip() for name, expression in self.constraints.items()}

    def column(self, name: str) -> ColumnDefinition | None:
        return next((c for c in self.columns if c.name == name), None)


class DefinitionError(ConfigError):
    """Definitions that cannot be used; every problem names its file and field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid table definitions:\n" + "\n".join(f"  {p}" for p in problems))


def _location(loc: tuple[Any, ...], data: Any) -> str:
    """('columns', 3, 'type') -> 'columns[3] (station_id).type'."""
    text = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and "name" in node:
                text += f" ({node['name']})"
        else:
            text += f".{part}" if text else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return text or "(file)"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_definition_file(path: Path) -> TableDefinition:
    """Parse and validate one definition file (its folder must be its layer)."""
    shown = _shown(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DefinitionError([f"{shown}: cannot read YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise DefinitionError([f"{shown}: (file): expected a mapping of fields"])
    try:
        data = expand(data)
    except ShapeError as exc:
        raise DefinitionError([f"{shown}: {exc}"]) from None
    try:
        definition = TableDefinition.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            location = _location(error["loc"], data)
            named = re.match(r"^([a-z_]+): (.*)$", message, re.DOTALL)
            if not error["loc"] and named:  # a whole-table rule names its field itself
                location, message = named.groups()
            problems.append(f"{shown}: {location}: {message}")
        raise DefinitionError(problems) from None
    problems = []
    if path.stem != definition.name:
        problems.append(f"{shown}: name: {definition.name!r} differs from the file name "
                        f"{path.stem!r}")
    if path.parent.name != definition.layer:
        problems.append(f"{shown}: layer: {definition.layer!r} but the file is in folder "
                        f"{path.parent.name!r}")
    if definition.constraints:
        try:
            check_constraints(definition.delta_schema(), definition.constraints)
        except ConstraintError as exc:
            problems.append(f"{shown}: constraints.{exc.name}: {exc.reason}")
    if problems:
        raise DefinitionError(problems)
    return definition


def load_definitions(folder: Path | None = None,
                     tables: tuple[str, ...] | list[str] = ()) -> list[TableDefinition]:
    """Every definition under `folder` (default: lakehouse/tables), validated, by name.

    With `tables`, only those (all files are still validated; unknown names are errors).
    """
    folder = folder or DEFINITIONS_DIR
    if not folder.is_dir():
        raise DefinitionError([f"{_shown(folder)}: no such definitions folder"])
    problems: list[str] = []
    definitions: dict[str, TableDefinition] = {}
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml"))
    for path in files:
        if path.parent.parent != folder or path.parent.name not in LAYERS:
            problems.append(f"{_shown(path)}: (file): definitions live in "
                            f"<folder>/<layer>/<name>.yaml with layer one of {', '.join(LAYERS)}")
            continue
        try:
            definition = load_definition_file(path)
        except DefinitionError as exc:
            problems.extend(exc.problems)
            continue
        if definition.name in definitions:
            problems.append(f"{_shown(path)}: name: {definition.name!r} is defined twice")
        definitions[definition.name] = definition
    if not files:
        problems.append(f"{_shown(folder)}: no table definitions (<layer>/<name>.yaml)")
    unknown = [t for t in tables if t not in definitions]
    if unknown and not problems:
        problems.append(f"--table: no definition named {unknown} "
                        f"(known: {', '.join(sorted(definitions))})")
    if problems:
        raise DefinitionError(problems)
    chosen = [definitions[t] for t in tables] if tables else list(definitions.values())
    return sorted(chosen, key=lambda d: (LAYERS.index(d.layer), d.name))
