"""`lakehouse tables validate | diff | apply` and `lakehouse maintain`: tables as code.

Exit codes: 0 success (diff: no drift); 1 diff found drift that apply would converge, or
an apply/maintain step failed; 2 invalid definitions or configuration; 3 a change that
would break readers is pending (diff) or was refused (apply; other tables still applied).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from deltalake.exceptions import DeltaError

from cli.exit_codes import FAILED, REFUSED
from cli.terminal import console, say
from lakehouse.definitions import DEFINITIONS_DIR, TableDefinition, load_definitions
from lakehouse.storage import storage_options
from settings import ConfigError, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_DRIFT = FAILED
EXIT_BREAKING = REFUSED


def _target(ctx: click.Context) -> tuple[str, dict[str, str]]:
    """The tables root of the active profile and the storage options to reach it."""
    settings = load_settings(ctx.obj.get("profile"))
    root = settings.tables_uri
    try:
        return root, storage_options(settings, root)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _catalog(ctx: click.Context) -> dict[str, str]:
    """The shared catalog's tables (name -> location), read without Spark."""
    from lakehouse.catalog import registered_tables

    return registered_tables(load_settings(ctx.obj.get("profile")))


def _definitions(folder: Path | None, tables: tuple[str, ...]) -> list[TableDefinition]:
    return load_definitions(folder or DEFINITIONS_DIR, tables)


def _storage_failure(root: str, exc: Exception) -> NoReturn:
    console.print(f"[red]error:[/red] cannot work on the tables under {root}: ", end="")
    console.print(str(exc), markup=False)
    sys.exit(2)


definitions_option = click.option(
    "--definitions", type=click.Path(path_type=Path, file_okay=False), default=None,
    help=f"Folder of <layer>/<name>.yaml definitions (default: {DEFINITIONS_DIR.name}/ "
         "in the lakehouse package).")
table_option = click.option("--table", "tables", multiple=True,
                            help="Only this table (repeatable). Default: every definition.")


@click.group()
def tables() -> None:
    """Tables as code: validate definitions, show drift, converge the live Delta tables.

    Exit codes: 0 ok / in sync; 1 drift found (diff) or a step failed; 2 invalid
    definitions or configuration; 3 a breaking change is pending (diff) or was refused
    (apply).
    """


@tables.command()
@definitions_option
@table_option
def validate(definitions: Path | None, tables: tuple[str, ...]) -> None:
    """Check every definition file (types, properties, constraints); no storage needed."""
    loaded = _definitions(definitions, tables)
    layers: dict[str, int] = {}
    for definition in loaded:
        layers[definition.layer] = layers.get(definition.layer, 0) + 1
    counts = ", ".join(f"{layer} {count}" for layer, count in layers.items())
    say(f"{len(loaded)} table definitions valid ({counts})")


def _print_plans(plans: list) -> None:
    for plan in plans:
        if plan.in_sync:
            click.echo(f"= {plan.name}: in sync (version {plan.version})")
            continue
        state = "missing" if plan.version is None else f"version {plan.version}"
        click.echo(f"~ {plan.name} ({state}):")
        for change in plan.changes:
            marker = "!" if change.breaking else "+"
            click.echo(f"    {marker} {change.describe()}")


@tables.command()
@definitions_option
@table_option
@click.pass_context
def diff(ctx: click.Context, definitions: Path | None, tables: tuple[str, ...]) -> None:
    """Show drift between the definitions and the live tables (read only).

    `+` lines are what apply would do, `!` lines are breaking changes apply refuses.
    Exit 0 when everything is in sync, 1 on drift, 3 when a breaking change is pending.
    """
    from lakehouse.table_manager import plan_tables

    loaded = _definitions(definitions, tables)
    root, storage = _target(ctx)
    say(f"comparing {len(loaded)} definitions with the tables under {root}")
    try:
        plans = plan_tables(loaded, root, storage, _catalog(ctx))
    except (DeltaError, OSError) as exc:
        _storage_failure(root, exc)
    _print_plans(plans)
    drifted = [p for p in plans if not p.in_sync]
    breaking = [p for p in plans if p.refused]
    say(f"{len(plans) - len(drifted)} in sync, {len(drifted)} drifted, "
         f"{len(breaking)} with breaking changes")
    if breaking:
        sys.exit(EXIT_BREAKING)
    if drifted:
        sys.exit(EXIT_DRIFT)


@tables.command()
@definitions_option
@table_option
@click.pass_context
def apply(ctx: click.Context, definitions: Path | None, tables: tuple[str, ...]) -> None:
    """Create missing tables and converge properties, constraints, additive columns.

    Idempotent: a second run reports nothing to do and commits nothing. A table whose
    plan holds a breaking change is left untouched (exit 3), with the reason.
    """
    from lakehouse.table_manager import apply_definitions
    from spark_streaming.session import command_session

    loaded = _definitions(definitions, tables)
    root, storage = _target(ctx)
    say(f"applying {len(loaded)} definitions to the tables under {root}")
    with contextlib.ExitStack() as held:

        def start_spark() -> SparkSession:
            say("starting Spark for the DDL")
            return held.enter_context(command_session(
                load_settings(ctx.obj.get("profile")), "lakehouse-tables-apply",
                managed_tables=False))

        try:
            summary = apply_definitions(loaded, root, storage, _catalog(ctx), start_spark,
                                        say, lambda line: console.print(line, markup=False))
        except (DeltaError, OSError) as exc:
            _storage_failure(root, exc)
    if summary.counts["refused"]:
        sys.exit(EXIT_BREAKING)
    if summary.failed:
        sys.exit(1)


@click.command()
@definitions_option
@table_option
@click.option("--no-vacuum", is_flag=True, help="Skip vacuum (compaction and checkpoint only).")
@click.pass_context
def maintain(ctx: click.Context, definitions: Path | None, tables: tuple[str, ...],
             no_vacuum: bool) -> None:
    """Compact (or Z-order where configured), vacuum within each table's retention and
    checkpoint the log; reports files before and after. Missing tables are skipped."""
    from lakehouse.maintenance import maintain_tables
    from spark_streaming.session import command_session

    loaded = _definitions(definitions, tables)
    root, storage = _target(ctx)
    say(f"maintaining {len(loaded)} tables under {root} (starting Spark)")
    try:
        with command_session(load_settings(ctx.obj.get("profile")),
                             "lakehouse-maintain", managed_tables=False) as spark:
            results = maintain_tables(spark, loaded, root, storage, say, vacuum=not no_vacuum)
    except (DeltaError, OSError) as exc:
        _storage_failure(root, exc)
    done = [r for r in results if r.status == "maintained"]
    before = sum(r.before.files for r in done if r.before)
    after = sum(r.after.files for r in done if r.after)
    say(f"maintenance done: {len(done)} tables, files {before} -> {after}, "
         f"{len(results) - len(done)} missing")
