"""`lakehouse quality`: the silver tables' table-level expectations (Great Expectations),
on their own, so a scheduler can run them without the streaming queries (exit 1 on a
failed expectation: the Airflow task fails visibly)."""

from __future__ import annotations

import sys

import click

from cli.context import settings_of
from cli.exit_codes import FAILED
from cli.terminal import say


@click.command()
@click.option("--table", "tables", multiple=True,
              help="Only this silver table (repeatable). Default: every table with a suite "
                   "in expectations/ that has table-level expectations.")
@click.pass_context
def quality(ctx: click.Context, tables: tuple[str, ...]) -> None:
    """Run the table-level expectation suites over the silver tables (read only; results
    appended to quality_results, Data Docs rebuilt). Exit 1 if any expectation failed."""
    from spark_streaming.session import command_session
    from spark_streaming.silver import run_table_checks
    from spark_streaming.silver.spec import load_specs

    settings = settings_of(ctx)
    specs = load_specs(tables=tables)  # invalid specs stop here, before Spark starts
    with command_session(settings, "lakehouse-quality", managed_tables=False) as spark:
        results = run_table_checks(spark, settings, [s.table for s in specs], report=say)
    failed = [f"{r['checked_table']}.{r['rule']}" for r in results if not r["success"]]
    say(f"quality: {len(results) - len(failed)} of {len(results)} table-level expectations "
         f"passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        sys.exit(FAILED)
