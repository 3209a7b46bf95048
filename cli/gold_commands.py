"""`lakehouse gold`: bring the gold tables up to date with silver (or rebuild them)."""

from __future__ import annotations

import json
import sys

import click

from cli.terminal import say
from settings import load_settings


@click.command()
@click.option("--table", "tables", multiple=True,
              help="Only this gold table (repeatable). Default: every gold table.")
@click.option("--rebuild", is_flag=True,
              help="Recompute the whole table from silver instead of the changed keys.")
@click.pass_context
def gold(ctx: click.Context, tables: tuple[str, ...], rebuild: bool) -> None:
    """Silver -> gold aggregates: recompute only what silver changed since the last run.

    Idempotent: with nothing new in silver no table gets a commit. The silver versions
    consumed are recorded in each gold commit. The tables must exist (`lakehouse tables
    apply`). Exit codes: 0 ok; 2 bad configuration or missing tables; 3 refused: another
    process is writing one of the tables.
    """
    from spark_streaming.gold import METRICS, behind, preflight, run_gold
    from spark_streaming.session import command_session
    from spark_streaming.table_lock import writing

    unknown = [t for t in tables if t not in METRICS]
    if unknown:
        raise click.BadParameter(f"{unknown} (known: {', '.join(METRICS)})",
                                 param_hint="--table")
    settings = load_settings(ctx.obj.get("profile"))
    chosen = preflight(settings, tables)  # missing tables are reported before Spark starts
    if not rebuild and not any(behind(settings, table) for table in chosen):
        say(f"gold: {', '.join(chosen)} up to date with silver, nothing to do")
        return
    say(f"gold: {', '.join(chosen)} under {settings.tables_uri}"
         + (" (rebuild)" if rebuild else ""))
    # taken before Spark starts: refused at once while another process writes them
    with (writing(settings, chosen, "lakehouse " + " ".join(sys.argv[1:])),
          command_session(settings, "lakehouse-gold", managed_tables=False) as spark):
        written = run_gold(spark, settings, list(tables) or None, rebuild, say)
    say(f"gold done: rows written {json.dumps(written)}")
