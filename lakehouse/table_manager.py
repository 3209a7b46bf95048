"""Converge live Delta tables to their definitions.

`plan_table` compares one definition with the live table under a tables root: missing
table, property drift, constraint drift, schema and description changes. It only reads
the Delta log (delta-rs), so `tables diff` and an `apply` with nothing to do never start
Spark. `apply_plan` carries a plan out idempotently with Spark SQL DDL on delta-spark:
`CREATE TABLE ... USING delta`, `ALTER TABLE ... SET TBLPROPERTIES / ADD COLUMNS / ALTER
COLUMN / ADD|DROP CONSTRAINT`, and registers the table under its catalog name
(`bronze.station_status`) in the shared metastore when given the catalog's listing.
A plan holding a change that would break readers (dropped or renamed column, type
change, NOT NULL on an existing column, new NOT NULL column, partitioning change) is
refused as a whole, with the reason. A table in sync gets no commit at all: every
statement is guarded by the comparison.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from lakehouse import column_types
from lakehouse.catalog import catalog_name, catalog_sql
from lakehouse.constraint_check import CONSTRAINT_PREFIX
from lakehouse.definitions import ColumnDefinition, TableDefinition
from lakehouse.storage import delta_path_sql, spark_uri
from settings.report import Report

CREATE = "create table"
SET_PROPERTY = "set property"
ADD_CONSTRAINT = "add constraint"
REPLACE_CONSTRAINT = "replace constraint"
DROP_CONSTRAINT = "drop constraint"
ADD_COLUMN = "add column"
DROP_NOT_NULL = "drop not null"
SET_COLUMN_DESCRIPTION = "set column description"
SET_TABLE_DESCRIPTION = "set table description"
REGISTER = "register"
REFUSE = "refuse"


class ApplyError(RuntimeError):
    """A step of `apply` that delta-spark rejected; names the table and the step."""


@dataclass(frozen=True)
class Change:
    kind: str
    subject: str
    detail: str
    value: str | None = None

    @property
    def breaking(self) -> bool:
        return self.kind == REFUSE

    def describe(self) -> str:
        return f"{self.kind} {self.subject}: {self.detail}" if self.subject else (
            f"{self.kind}: {self.detail}")


@dataclass
class TablePlan:
    definition: TableDefinition
    uri: str
    version: int | None  # None: the table does not exist
    changes: list[Change] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def refused(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]

    @property
    def in_sync(self) -> bool:
        return not self.changes


def table_location(root: str, name: str) -> str:
    """URI of table `name` under a tables root (s3://bucket/prefix or a local folder)."""
    return f"{root.rstrip('/')}/{name}"


def open_table(uri: str, storage: dict[str, str]) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=storage)
    except TableNotFoundError:
        return None


# ---------------------------------------------------------------------------- planning


def _live_columns(table: DeltaTable) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}


def _schema_changes(definition: TableDefinition, table: DeltaTable) -> list[Change]:
    live = _live_columns(table)
    wanted = {c.name: c for c in definition.columns}
    changes: list[Change] = []
    partitions = list(table.metadata().partition_columns)
    if partitions != definition.partition_by:
        changes.append(Change(REFUSE, "partition_by", (
            f"the table is partitioned by {partitions or 'nothing'}, the definition says "
            f"{definition.partition_by or 'nothing'}: repartitioning rewrites every file and "
            "breaks readers' partition filters; create a new table and backfill it, or "
            "restore partition_by")))
    dropped = [name for name in live if name not in wanted]
    added = [c for c in definition.columns if c.name not in live]
    for name in dropped:
        live_type = column_types.render(live[name]["type"])
        twin = next((c.name for c in added if c.type == live_type), None)
        hint = (f" (it looks like a rename to {twin!r}: renaming breaks readers too; add the "
                f"new column as nullable and keep {name!r})") if twin else ""
        changes.append(Change(REFUSE, name, (
            f"column {name} ({live_type}) is in the table but not in the definition: dropping "
            f"a column breaks every reader and job that selects it; put it back in the "
            f"definition (a column can be deprecated in its description){hint}")))
    for column in added:
        if column.nullable:
            changes.append(Change(ADD_COLUMN, column.name, f"new nullable {column.type} column"))
        else:
            changes.append(Change(REFUSE, column.name, (
                f"new column {column.name} is nullable: false, but the rows already in the "
                "table have no value for it; add it as nullable (and a CHECK constraint "
                "once it is backfilled)")))
    for name, column in wanted.items():
        if name in live:
            changes.extend(_column_changes(column, live[name]))
    return changes


def _column_changes(column: ColumnDefinition, live: dict[str, Any]) -> list[Change]:
    changes = []
    live_type = column_types.render(live["type"])
    if live_type != column.type:
        changes.append(Change(REFUSE, column.name, (
            f"type change {live_type} -> {column.type}: existing files hold {live_type} and "
            "readers expect it; add a new column with the new type instead")))
    if live["nullable"] and not column.nullable:
        changes.append(Change(REFUSE, column.name, (
            "NOT NULL on an existing nullable column: rows already stored may be null and "
            "writers sending null would start failing; keep it nullable and add a CHECK "
            "constraint after backfilling")))
    elif not live["nullable"] and column.nullable:
        changes.append(Change(DROP_NOT_NULL, column.name, "the column becomes nullable"))
    if live.get("metadata", {}).get("comment") != column.description:
        changes.append(Change(SET_COLUMN_DESCRIPTION, column.name, "description differs",
                              column.description))
    return changes


def _property_changes(definition: TableDefinition, configuration: dict[str, str]) -> list[Change]:
    return [Change(SET_PROPERTY, key, f"{configuration.get(key, '(unset)')} -> {value}", value)
            for key, value in definition.properties.items() if configuration.get(key) != value]


_OUTSIDE_QUOTES_SPACE = re.compile(r"('(?:[^'\\]|\\.)*')|\s+")


def same_expression(left: str, right: str) -> bool:
    """Whether two CHECK expressions are the same text but for whitespace outside string
    literals (delta-spark stores `ADD CONSTRAINT` expressions as parser tokens joined by
    spaces: `x IN ('a','b')` is kept as `x IN ( 'a' , 'b' )`)."""
    def squeeze(text: str) -> str:
        return _OUTSIDE_QUOTES_SPACE.sub(lambda m: m.group(1) or "", text)
    return squeeze(left) == squeeze(right)


def _constraint_changes(definition: TableDefinition,
                        configuration: dict[str, str]) -> list[Change]:
    live = {k[len(CONSTRAINT_PREFIX):]: v for k, v in configuration.items()
            if k.startswith(CONSTRAINT_PREFIX)}
    wanted = definition.stored_constraints
    changes = []
    for name, expression in wanted.items():
        if name not in live:
            changes.append(Change(ADD_CONSTRAINT, name, expression, definition.constraints[name]))
        elif not same_expression(live[name], expression):
            changes.append(Change(REPLACE_CONSTRAINT, name, f"{live[name]} -> {expression}",
                                  definition.constraints[name]))
    changes.extend(Change(DROP_CONSTRAINT, name, f"{live[name]} (not in the definition)")
                   for name in live if name not in wanted)
    return changes


def _registration(definition: TableDefinition, uri: str,
                  catalog: dict[str, str] | None) -> list[Change]:
    if catalog is None:
        return []
    name, location = catalog_name(definition), spark_uri(uri)
    registered = catalog.get(name)
    if registered == location:
        return []
    detail = (f"as a catalog table at {location}" if registered is None
              else f"the catalog points at {registered}; re-point it to {location}")
    return [Change(REGISTER, name, detail, registered)]


def plan_table(definition: TableDefinition, root: str, storage: dict[str, str],
               catalog: dict[str, str] | None = None) -> TablePlan:
    """What `apply` would do to make the live table match `definition` (and, given the
    catalog's listing from `lakehouse.catalog.registered_tables`, to register it)."""
    uri = table_location(root, definition.name)
    table = open_table(uri, storage)
    registration = _registration(definition, uri, catalog)
    if table is None:
        summary = (f"{len(definition.columns)} columns, partitioned by "
                   f"{definition.partition_by or 'nothing'}, {len(definition.properties)} "
                   f"properties, {len(definition.constraints)} constraints")
        return TablePlan(definition, uri, None, [Change(CREATE, "", summary), *registration])
    metadata = table.metadata()
    configuration = dict(metadata.configuration)
    changes = _schema_changes(definition, table)
    changes += _property_changes(definition, configuration)
    changes += _constraint_changes(definition, configuration)
    if metadata.description != definition.description:
        changes.append(Change(SET_TABLE_DESCRIPTION, "", "description differs",
                              definition.description))
    changes += registration
    return TablePlan(definition, uri, table.version(), changes)


def plan_tables(definitions: list[TableDefinition], root: str, storage: dict[str, str],
                catalog: dict[str, str] | None = None) -> list[TablePlan]:
    return [plan_table(d, root, storage, catalog) for d in definitions]


# ---------------------------------------------------------------------------- applying


def _literal(value: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _properties_sql(properties: dict[str, str]) -> str:
    return ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items())


def _step(spark: SparkSession, plan: TablePlan, what: str, statement: str) -> None:
    try:
        spark.sql(statement)
    except (PySparkException, Py4JJavaError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ApplyError(f"{plan.name}: {what} failed: {reason}") from None


def _add_constraint(spark: SparkSession, plan: TablePlan, table: str, name: str,
                    expression: str) -> None:
    _step(spark, plan, f"add constraint {name} (do the rows already stored satisfy it?)",
          f"ALTER TABLE {table} ADD CONSTRAINT `{name}` CHECK ({expression})")


def _create(spark: SparkSession, plan: TablePlan) -> None:
    """One CREATE TABLE, one commit. The CHECK constraints go in as their
    `delta.constraints.<name>` properties: a new table has no rows to validate, and Delta
    refuses CONSTRAINT clauses in CREATE TABLE (measured on delta-spark 4.4.0)."""
    definition = plan.definition
    columns = ", ".join(c.ddl(spark) for c in definition.columns)
    statement = f"CREATE TABLE {delta_path_sql(plan.uri)} ({columns}) USING delta"
    if definition.partition_by:
        statement += f" PARTITIONED BY ({', '.join(f'`{c}`' for c in definition.partition_by)})"
    if definition.description:
        statement += f" COMMENT {_literal(definition.description)}"
    properties = {**definition.properties, **{
        f"{CONSTRAINT_PREFIX}{name}": expression
        for name, expression in definition.stored_constraints.items()}}
    if properties:
        statement += f" TBLPROPERTIES ({_properties_sql(properties)})"
    _step(spark, plan, "create", statement)


def _of(plan: TablePlan, kind: str) -> list[Change]:
    return [c for c in plan.changes if c.kind == kind]


def _converge(spark: SparkSession, plan: TablePlan) -> None:
    """Apply a non-breaking plan to an existing table, one statement per kind of change
    where Spark SQL allows it; order matters (constraints may use new columns)."""
    table = delta_path_sql(plan.uri)
    for change in _of(plan, DROP_CONSTRAINT) + _of(plan, REPLACE_CONSTRAINT):
        _step(spark, plan, f"drop constraint {change.subject}",
              f"ALTER TABLE {table} DROP CONSTRAINT `{change.subject}`")
    properties = {c.subject: c.value for c in _of(plan, SET_PROPERTY) if c.value is not None}
    if properties:
        _step(spark, plan, f"set properties {sorted(properties)}",
              f"ALTER TABLE {table} SET TBLPROPERTIES ({_properties_sql(properties)})")
    new_columns = [c for c in (plan.definition.column(ch.subject)
                               for ch in _of(plan, ADD_COLUMN)) if c is not None]
    if new_columns:
        _step(spark, plan, f"add columns {[c.name for c in new_columns]}",
              f"ALTER TABLE {table} ADD COLUMNS ("
              f"{', '.join(c.ddl(spark) for c in new_columns)})")
    for change in _of(plan, DROP_NOT_NULL):
        _step(spark, plan, f"drop NOT NULL on {change.subject}",
              f"ALTER TABLE {table} ALTER COLUMN `{change.subject}` DROP NOT NULL")
    for change in _of(plan, ADD_CONSTRAINT) + _of(plan, REPLACE_CONSTRAINT):
        _add_constraint(spark, plan, table, change.subject,
                        plan.definition.stored_constraints[change.subject])
    for change in _of(plan, SET_COLUMN_DESCRIPTION):
        _step(spark, plan, f"set description of {change.subject}",
              f"ALTER TABLE {table} ALTER COLUMN `{change.subject}` "
              f"COMMENT {_literal(change.value or '')}")
    for change in _of(plan, SET_TABLE_DESCRIPTION):
        _step(spark, plan, "set description", f"ALTER TABLE {table} SET TBLPROPERTIES "
              f"({_properties_sql({'comment': change.value or ''})})")


def _register(spark: SparkSession, plan: TablePlan, change: Change) -> None:
    """Name the table in the shared catalog. The table is external: dropping a stale
    registration removes the name only, never the files."""
    database = change.subject.split(".")[0]
    _step(spark, plan, f"create database {database}",
          f"CREATE DATABASE IF NOT EXISTS `{database}`")
    name = catalog_sql(change.subject)
    if change.value is not None:  # registered elsewhere: re-point
        _step(spark, plan, f"drop the stale catalog entry {change.subject}",
              f"DROP TABLE IF EXISTS {name}")
    _step(spark, plan, f"register {change.subject}",
          f"CREATE TABLE IF NOT EXISTS {name} USING delta "
          f"LOCATION {_literal(spark_uri(plan.uri))}")


@dataclass(frozen=True)
class ApplyOutcome:
    name: str
    status: str  # "in sync" | "created" | "converged" | "registered" | "refused"
    version_before: int | None
    version_after: int | None


def needs_spark(plan: TablePlan) -> bool:
    """Whether `apply_plan` would run any statement for `plan`."""
    return not plan.in_sync and not plan.refused


def apply_plan(spark: SparkSession | None, plan: TablePlan, storage: dict[str, str],
               report: Report) -> ApplyOutcome:
    """Carry out `plan` (refused as a whole if it holds a breaking change); `spark` may be
    None when `needs_spark(plan)` is false."""
    if plan.in_sync:
        return ApplyOutcome(plan.name, "in sync", plan.version, plan.version)
    if plan.refused:
        return ApplyOutcome(plan.name, "refused", plan.version, plan.version)
    if spark is None:
        raise ValueError(f"{plan.name}: applying changes needs a Spark session")
    registration = _of(plan, REGISTER)
    if plan.version is None:
        report(f"{plan.name}: creating {plan.uri}")
        _create(spark, plan)
        status = "created"
    elif len(registration) < len(plan.changes):
        # Appends since planning do not matter: the plan is about metadata only.
        for change in plan.changes:
            report(f"{plan.name}: {change.describe()}")
        _converge(spark, plan)
        status = "converged"
    else:
        status = "registered"
    for change in registration:
        report(f"{plan.name}: register {change.subject} ({change.detail})")
        _register(spark, plan, change)
    after = DeltaTable(plan.uri, storage_options=storage).version()
    return ApplyOutcome(plan.name, status, plan.version, after)


STATUSES = ("in sync", "created", "converged", "registered", "refused")
# Tables applied at once, each from a thread of its own on the one Spark session.
APPLY_CONCURRENCY = 4


@dataclass
class ApplySummary:
    counts: dict[str, int]  # status -> tables
    failed: list[str]  # one message per table whose step failed
    refused: list[str] = field(default_factory=list)  # tables with a breaking change

    def line(self) -> str:
        return ", ".join(f"{n} {status}" for status, n in self.counts.items()) + (
            f", {len(self.failed)} failed" if self.failed else "")


def apply_definitions(definitions: list[TableDefinition], root: str, storage: dict[str, str],
                      catalog: dict[str, str], spark: Callable[[], SparkSession],
                      report: Report, problem: Report) -> ApplySummary:
    """Plan every definition, then carry the plans out; `spark` is called (once) only when
    a plan needs DDL, so a run with nothing to do starts no Spark, and the ingest hands in
    the session it runs its queries with. A refused table is reported change by change and
    left alone; a failed one is reported and the others still applied. Progress goes to
    `report`, refusals and failures to `problem`."""
    summary = ApplySummary(counts=dict.fromkeys(STATUSES, 0), failed=[])
    plans = plan_tables(definitions, root, storage, catalog)
    session = spark() if any(needs_spark(plan) for plan in plans) else None

    def carried_out(plan: TablePlan) -> ApplyOutcome | ApplyError:
        try:
            return apply_plan(session, plan, storage, report)
        except ApplyError as exc:
            return exc

    # Each table's DDL waits mostly on the bucket and the metastore, not on the CPU. The
    # databases come first, one by one: two threads creating the same one would race.
    if session is not None:
        for database in sorted({c.subject.split(".")[0] for plan in plans
                                if needs_spark(plan) for c in _of(plan, REGISTER)}):
            session.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    with ThreadPoolExecutor(APPLY_CONCURRENCY) as pool:
        results = list(pool.map(carried_out, plans))
    for plan, result in zip(plans, results, strict=True):
        if plan.refused:
            summary.refused.append(plan.name)
            problem(f"{plan.name}: REFUSED, nothing applied to this table:")
            for change in plan.refused:
                problem(f"    ! {change.describe()}")
        if isinstance(result, ApplyError):
            problem(f"error: {result}")
            summary.failed.append(str(result))
            continue
        outcome = result
        summary.counts[outcome.status] += 1
        if outcome.status == "created":
            report(f"{plan.name}: created (version {outcome.version_after})")
        elif outcome.status == "registered":
            report(f"{plan.name}: registered in the catalog")
        elif outcome.status == "converged":
            report(f"{plan.name}: converged (version {outcome.version_before} -> "
                   f"{outcome.version_after})")
    if summary.counts["in sync"] == len(definitions) and not summary.failed:
        report(f"nothing to do: all {len(definitions)} tables match their definitions")
    else:
        report(summary.line())
    return summary
