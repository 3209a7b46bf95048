"""`lakehouse transform` and `lakehouse docs`: the dbt project over the lakehouse tables."""

from __future__ import annotations

import json
import signal
import sys
import time

import click
from rich.markup import escape

from analysis.docs_site import DocsSite, DocsSiteError
from cli.context import settings_of
from cli.terminal import console, say


@click.command()
@click.option("--select", "-s", "select", multiple=True,
              help="dbt node selection (repeatable or space-separated), e.g. `marts` or "
                   "'+dim_station fct_rentals_daily'.")
@click.option("--exclude", multiple=True, help="dbt nodes to leave out (repeatable).")
@click.option("--full-refresh", is_flag=True,
              help="Rebuild incremental models from scratch.")
@click.option("--force", is_flag=True,
              help="Build even when no table and no model changed since the last build.")
@click.option("--no-docs", is_flag=True, help="Skip `dbt docs generate`.")
@click.option("--no-freshness", is_flag=True, help="Skip `dbt source freshness`.")
@click.option("--timings-json", is_flag=True,
              help="Print the seconds of each step as one JSON line on stdout at the end.")
@click.argument("dbt_build_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def transform(ctx: click.Context, select: tuple[str, ...], exclude: tuple[str, ...],
              full_refresh: bool, force: bool, no_docs: bool, no_freshness: bool,
              timings_json: bool, dbt_build_args: tuple[str, ...]) -> None:
    """Build the dbt models over the lakehouse tables (`dbt build`: models and tests).

    Generates dbt/models/lakehouse from the table definitions, starts Spark on the shared
    catalog, then runs `dbt build`, `dbt docs generate` and `dbt source freshness` in this
    process (dbt/profiles.yml, target `session`). Marts are Delta tables in the catalog
    database `marts`. Exits 1 when a model or test fails.

    When no catalog table has a new Delta version and no model changed since the last
    successful build with the same options, it says so and builds nothing (seconds, no
    Spark); source freshness is still judged, at the current time.

    More `dbt build` options go after `--`, e.g. `lakehouse transform -- --fail-fast`.
    """
    from analysis.dbt_project import TransformError
    from analysis.transform import transform as run_transform

    settings = settings_of(ctx)
    args: list[str] = []
    for flag, values in (("--select", select), ("--exclude", exclude)):
        if values:  # each value may hold several space-separated selectors, as in dbt
            args += [flag, *(part for value in values for part in value.split())]
    if full_refresh:
        args.append("--full-refresh")
    args += dbt_build_args
    began = time.monotonic()
    try:
        result = run_transform(settings, args, say, docs=not no_docs,
                               freshness=not no_freshness, force=force)
    except TransformError as exc:
        console.print(f"[red]transform failed:[/red] {escape(str(exc))}")
        sys.exit(1)
    say(f"transform done in {time.monotonic() - began:.0f} s: "
         + ", ".join(f"{step} {seconds:.1f} s" for step, seconds in result.seconds.items()))
    if timings_json:
        click.echo(json.dumps(result.seconds))


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port on 127.0.0.1 (default: analysis.docs_port of lakehouse.yaml).")
@click.option("--no-generate", is_flag=True,
              help="Serve the docs generated last time (no Spark, no `dbt docs generate`).")
@click.pass_context
def docs(ctx: click.Context, port: int | None, no_generate: bool) -> None:
    """Generate the dbt docs site and serve it on 127.0.0.1 until Ctrl-C.

    Generating starts Spark on the shared catalog and runs `dbt docs generate`, so
    the catalog shows the current columns of every table; the site is the model list, each
    model's page and the lineage graph from the Kafka sources to the marts.
    """
    from analysis.dbt_project import DbtPaths, TransformError
    from analysis.transform import TransformResult, analysis_session, generate_docs

    settings = settings_of(ctx)
    site = DocsSite(DbtPaths.of(settings).target_dir, port or settings.analysis.docs_port)
    try:
        site.bind()  # a taken port fails before Spark starts
        if not no_generate:
            began = time.monotonic()
            with analysis_session(settings, TransformResult(), say) as (_, paths):
                generate_docs(settings, paths, say, TransformResult())
            say(f"docs generated in {time.monotonic() - began:.0f} s")
        _serve_until_interrupted(site)
    except (DocsSiteError, TransformError) as exc:
        site.stop()
        console.print(f"[red]docs failed:[/red] {escape(str(exc))}")
        sys.exit(1)
    except KeyboardInterrupt:
        site.stop()
        say("docs site stopped")


def _serve_until_interrupted(site: DocsSite) -> None:
    """Serve until Ctrl-C or SIGTERM, both raising KeyboardInterrupt here (the SIGINT handler
    pyspark installed for the generating session outlives it and fails once it stopped)."""
    previous = {sig: signal.signal(sig, signal.default_int_handler)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with site:
            say(f"dbt docs site at {site.url} (Ctrl-C stops)")
            site.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
