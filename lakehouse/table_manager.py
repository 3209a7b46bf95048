"""Converge live Delta tables to their definitions (delta-rs only, no Spark).

`plan_table` compares one definition with the live table under a tables root: missing
table, property drift, constraint drift, schema and description changes. `apply_plan`
carries a plan out idempotently: it creates missing tables, sets drifted properties,
replaces drifted constraints, adds nullable columns and relaxes NOT NULL; a plan holding a
change that would break readers (dropped or renamed column, type change, NOT NULL on an
existing column, new NOT NULL column, partitioning change) is refused as a whole, with the
reason. A table in sync gets no commit at all (delta-rs commits even a property set to
the value it already has, so every step is guarded by the comparison).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable, Field
from deltalake.exceptions import DeltaError, TableNotFoundError

from lakehouse import column_types
from lakehouse.constraint_check import CONSTRAINT_PREFIX, delta_error_text
from lakehouse.definitions import ColumnDefinition, TableDefinition

Report = Callable[[str], None]

CREATE = "create table"
SET_PROPERTY = "set property"
ADD_CONSTRAINT = "add constraint"
REPLACE_CONSTRAINT = "replace constraint"
DROP_CONSTRAINT = "drop constraint"
ADD_COLUMN = "add column"
DROP_NOT_NULL = "drop not null"
SET_COLUMN_DESCRIPTION = "set column description"
SET_TABLE_DESCRIPTION = "set table description"
SET_TABLE_NAME = "set table name"
REFUSE = "refuse"


class ApplyError(RuntimeError):
    """A step of `apply` that delta-rs rejected; names the table and the step."""


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


def _constraint_changes(definition: TableDefinition,
                        configuration: dict[str, str]) -> list[Change]:
    live = {k[len(CONSTRAINT_PREFIX):]: v for k, v in configuration.items()
            if k.startswith(CONSTRAINT_PREFIX)}
    wanted = definition.stored_constraints
    changes = []
    for name, expression in wanted.items():
        if name not in live:
            changes.append(Change(ADD_CONSTRAINT, name, expression, definition.constraints[name]))
        elif live[name] != expression:
            changes.append(Change(REPLACE_CONSTRAINT, name, f"{live[name]} -> {expression}",
                                  definition.constraints[name]))
    changes.extend(Change(DROP_CONSTRAINT, name, f"{live[name]} (not in the definition)")
                   for name in live if name not in wanted)
    return changes


def plan_table(definition: TableDefinition, root: str, storage: dict[str, str]) -> TablePlan:
    """What `apply` would do to make the live table match `definition`."""
    uri = table_location(root, definition.name)
    table = open_table(uri, storage)
    if table is None:
        summary = (f"{len(definition.columns)} columns, partitioned by "
                   f"{definition.partition_by or 'nothing'}, {len(definition.properties)} "
                   f"properties, {len(definition.constraints)} constraints")
        return TablePlan(definition, uri, None, [Change(CREATE, "", summary)])
    metadata = table.metadata()
    configuration = dict(metadata.configuration)
    changes = _schema_changes(definition, table)
    changes += _property_changes(definition, configuration)
    changes += _constraint_changes(definition, configuration)
    if metadata.description != definition.description:
        changes.append(Change(SET_TABLE_DESCRIPTION, "", "description differs",
                              definition.description))
    if metadata.name != definition.name:
        changes.append(Change(SET_TABLE_NAME, "", f"{metadata.name} -> {definition.name}",
                              definition.name))
    return TablePlan(definition, uri, table.version(), changes)


def plan_tables(definitions: list[TableDefinition], root: str,
                storage: dict[str, str]) -> list[TablePlan]:
    return [plan_table(d, root, storage) for d in definitions]


# ---------------------------------------------------------------------------- applying


def _step(plan: TablePlan, what: str, action: Callable[[], object]) -> None:
    try:
        action()
    except DeltaError as exc:
        raise ApplyError(f"{plan.name}: {what} failed: {delta_error_text(exc)}") from None


def _create(plan: TablePlan, storage: dict[str, str]) -> None:
    definition = plan.definition
    _step(plan, "create", lambda: DeltaTable.create(
        plan.uri, definition.delta_schema(), mode="error",
        partition_by=definition.partition_by or None, name=definition.name,
        description=definition.description, configuration=definition.properties,
        storage_options=storage))
    if definition.constraints:
        table = DeltaTable(plan.uri, storage_options=storage)
        _step(plan, "add constraints",
              lambda: table.alter.add_constraint(dict(definition.constraints)))


def _of(plan: TablePlan, kind: str) -> list[Change]:
    return [c for c in plan.changes if c.kind == kind]


def _converge(plan: TablePlan, table: DeltaTable) -> None:
    """Apply a non-breaking plan to an existing table, each kind of change in one commit
    where delta-rs allows it; order matters (constraints may use new columns)."""
    alter = table.alter
    for change in _of(plan, DROP_CONSTRAINT) + _of(plan, REPLACE_CONSTRAINT):
        _step(plan, f"drop constraint {change.subject}",
              lambda c=change: alter.drop_constraint(c.subject))
    properties = {c.subject: c.value for c in _of(plan, SET_PROPERTY) if c.value is not None}
    if properties:
        _step(plan, f"set properties {sorted(properties)}",
              lambda: alter.set_table_properties(properties))
    new_columns = [plan.definition.column(c.subject) for c in _of(plan, ADD_COLUMN)]
    if new_columns:
        fields = [Field.from_json(json.dumps(c.delta_field())) for c in new_columns if c]
        _step(plan, f"add columns {[f.name for f in fields]}", lambda: alter.add_columns(fields))
    for change in _of(plan, DROP_NOT_NULL):
        _step(plan, f"drop NOT NULL on {change.subject}",
              lambda c=change: alter.drop_column_not_null(c.subject))
    constraints = {c.subject: c.value for c in _of(plan, ADD_CONSTRAINT)
                   + _of(plan, REPLACE_CONSTRAINT) if c.value is not None}
    if constraints:
        _step(plan, f"add constraints {sorted(constraints)} (do the rows already stored "
                    "satisfy them?)", lambda: alter.add_constraint(constraints))
    for change in _of(plan, SET_COLUMN_DESCRIPTION):
        _step(plan, f"set description of {change.subject}", lambda c=change:
              alter.set_column_metadata(c.subject, {"comment": c.value or ""}))
    for change in _of(plan, SET_TABLE_DESCRIPTION):
        _step(plan, "set description", lambda c=change: alter.set_table_description(c.value))
    for change in _of(plan, SET_TABLE_NAME):
        _step(plan, "set name", lambda c=change: alter.set_table_name(c.value))


@dataclass(frozen=True)
class ApplyOutcome:
    name: str
    status: str  # "in sync" | "created" | "converged" | "refused"
    version_before: int | None
    version_after: int | None


def apply_plan(plan: TablePlan, storage: dict[str, str], report: Report) -> ApplyOutcome:
    """Carry out `plan` (refused as a whole if it holds a breaking change)."""
    if plan.in_sync:
        return ApplyOutcome(plan.name, "in sync", plan.version, plan.version)
    if plan.refused:
        return ApplyOutcome(plan.name, "refused", plan.version, plan.version)
    if plan.version is None:
        report(f"{plan.name}: creating {plan.uri}")
        _create(plan, storage)
        status = "created"
    else:
        # Appends since planning do not matter: the plan is about metadata only.
        table = DeltaTable(plan.uri, storage_options=storage)
        for change in plan.changes:
            report(f"{plan.name}: {change.describe()}")
        _converge(plan, table)
        status = "converged"
    after = DeltaTable(plan.uri, storage_options=storage).version()
    return ApplyOutcome(plan.name, status, plan.version, after)
