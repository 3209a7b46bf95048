"""`lakehouse`: the project's command line (setup, the embedded stack, pipeline commands)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import sys
import threading
import time

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.analysis_commands import docs, transform
from cli.connectors_commands import connectors
from cli.gold_commands import gold
from cli.kafka_commands import kafka
from cli.notebooks_commands import notebooks
from cli.rentals_commands import rentals
from cli.scrape_commands import scrape, simulator
from cli.silver_commands import silver
from cli.tables_commands import maintain, tables
from cli.topics_commands import topics
from infra.components.base import StackError
from infra.components.postgres import Postgres
from infra.install import SetupError, run_setup
from infra.layout import StateLayout
from infra.stack import Stack, replication_advice
from settings import ConfigError, Settings, load_settings
from settings.env_file import ensure_env_file
from spark_streaming.table_lock import TableBusy

DISTRIBUTION = "lakehouse-ingest"  # pyproject.toml [project] name
console = Console(stderr=True, highlight=False, soft_wrap=True)


def _say(message: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")


def _settings(ctx: click.Context) -> Settings:
    if "settings" not in ctx.obj:
        ctx.obj["settings"] = load_settings(ctx.obj.get("profile"))
    return ctx.obj["settings"]


def _format_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _package_version() -> str:
    """The installed distribution's version (no import of the heavy modules)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: `pip install -e .`)"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_package_version(), prog_name="lakehouse",
                      message="%(prog)s %(version)s")
@click.option("--profile", envvar="LAKEHOUSE_PROFILE", default=None,
              help="Configuration profile of lakehouse.yaml (default: its default_profile).")
@click.pass_context
def cli(ctx: click.Context, profile: str | None) -> None:
    """Kafka -> Spark -> Delta lakehouse: run it on a laptop or against real clusters."""
    ctx.ensure_object(dict)
    ctx.obj["profile"] = profile


@cli.command()
@click.pass_context
def setup(ctx: click.Context) -> None:
    """Install the stack's binaries and jars (checksummed) and write .env if missing."""
    from settings.loader import PROJECT_DIR

    if ensure_env_file(PROJECT_DIR):
        _say(f"wrote {PROJECT_DIR / '.env'} with generated local secrets")
        changed = 1
    else:
        changed = 0
    settings = _settings(ctx)
    changed += run_setup(StateLayout(settings.state_path, settings.tools_path), _say)
    if changed:
        _say(f"[green]setup done[/green]: {changed} change(s); state in {settings.state_path}")
    else:
        _say("[green]setup: nothing to do[/green], everything is installed and verified")


@cli.command()
@click.option("--brokers", type=click.IntRange(1, 9), default=None,
              help="Kafka nodes (broker + controller each) for this start; default: the "
                   "setting embedded.kafka_brokers (1).")
@click.pass_context
def up(ctx: click.Context, brokers: int | None) -> None:
    """Start the embedded stack (idempotent: healthy components are left alone)."""
    settings = _settings(ctx)
    if brokers is not None and brokers != settings.embedded.kafka_brokers:
        try:
            settings = settings.with_kafka_brokers(brokers)
        except ValueError as exc:
            raise ConfigError(f"--brokers {brokers}: {exc}") from exc
        _say(f"{brokers} Kafka brokers for this start; other commands bootstrap from every "
             f"broker only with LAKEHOUSE_EMBEDDED__KAFKA_BROKERS={brokers} (or "
             "embedded.kafka_brokers in lakehouse.yaml)")
    advice = replication_advice(settings)
    if advice:
        _say(f"[yellow]note:[/yellow] {advice}")
    stack = Stack(settings)
    began = time.monotonic()
    stack.up(_say)
    _say(f"[green]stack healthy[/green] in {time.monotonic() - began:.1f} s "
         f"(logs: {stack.layout.logs})")
    _print_status(stack, as_json=False)


@cli.command()
@click.pass_context
def down(ctx: click.Context) -> None:
    """Stop every component gracefully, then forcefully; a no-op when nothing runs."""
    Stack(_settings(ctx)).down(_say)


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print every section as one JSON object on stdout (with --watch: one "
                   "object a line per refresh).")
@click.option("--watch", "watch", type=click.FloatRange(min=1), default=None,
              is_flag=False, flag_value=5.0, metavar="[SECONDS]",
              help="Refresh in place every SECONDS (default 5) until Ctrl-C.")
@click.option("--servers-only", is_flag=True,
              help="Only the servers (what `lakehouse up` prints).")
@click.option("--stale-after", "stale_after", multiple=True, metavar="LAYER=MINUTES",
              help="Freshness threshold of a layer's tables (repeatable); defaults: bronze "
                   "60, silver 60, gold 120; quarantine and quality are not checked.")
@click.option("--timeout", type=click.FloatRange(min=0.5), default=4.0, show_default=True,
              help="Seconds the pipeline parts may take; a part not done by then shows as "
                   "unavailable (the servers are always waited for).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, watch: float | None, servers_only: bool,
           stale_after: tuple[str, ...], timeout: float) -> None:
    """Servers and pipelines: sources, connectors, topics with each consumer's lag (Spark
    queries included), tables with their last commit and freshness.

    A part that cannot be reached shows as unavailable with the reason. Exit codes: 0 every
    server is up; 1 a server is not up (the pipelines do not change the exit code).
    """
    settings = _settings(ctx)
    if servers_only:
        sys.exit(0 if _print_status(Stack(settings), as_json) else 1)
    thresholds = _thresholds(stale_after)
    from cli import status_report

    if watch is None:
        report = status_report.gather(settings, thresholds, timeout)
        if as_json:
            click.echo(json.dumps(report.as_dict(), indent=2, default=str))
        else:
            Console(highlight=False).print(_render_report(report))
        _exit_status(report.servers_up, abandoned=bool(report.late))
    from rich.live import Live

    servers_up = False
    out = Console(highlight=False)
    # Ctrl-C / SIGTERM end the watch after the report being gathered: a flag, not a
    # KeyboardInterrupt, which can land in a library's callback and be swallowed there.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    live = Live(console=out, auto_refresh=False) if out.is_terminal and not as_json else None
    with live or contextlib.nullcontext():
        while not stop.is_set():
            report = status_report.gather(settings, thresholds, timeout)
            servers_up = report.servers_up
            if live is not None:
                live.update(_render_report(report), refresh=True)
            elif as_json:  # one object a line
                click.echo(json.dumps(report.as_dict(), default=str))
            else:  # not a terminal (a file, a pipe): one report after another
                out.print(f"-- {time.strftime('%H:%M:%S')} --")
                out.print(_render_report(report))
            sys.stdout.flush()
            stop.wait(watch)
    _exit_status(servers_up, abandoned=True)


def _exit_status(servers_up: bool, abandoned: bool) -> None:
    """Exit 0 when every server is up, else 1. With a part's threads left behind (past the
    deadline, or a watch stopped mid-gather), leave without interpreter shutdown: it would
    wait for them, and native code (delta-rs, librdkafka) torn down under a running thread
    can crash the process; a status has nothing to clean up."""
    code = 0 if servers_up else 1
    if not abandoned:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _thresholds(values: tuple[str, ...]) -> dict[str, float | None]:
    from lakehouse.definitions import LAYERS

    found: dict[str, float | None] = {}
    for value in values:
        layer, _, minutes = value.partition("=")
        if layer not in LAYERS:
            raise click.BadParameter(f"{value!r}: layer one of {', '.join(LAYERS)}",
                                     param_hint="--stale-after")
        try:
            found[layer] = float(minutes)
        except ValueError:
            raise click.BadParameter(f"{value!r}: MINUTES must be a number",
                                     param_hint="--stale-after") from None
    return found


def _render_report(report: object) -> object:
    """The status as rich renderables, one table per section (`cli.status_report` data)."""
    from rich.console import Group

    from cli.status_report import Section, StatusReport

    assert isinstance(report, StatusReport)
    now = report.generated_at
    parts: list[object] = []

    def section(title: str, part: Section, columns: tuple[str, ...],
                rows: list[tuple[str, ...]]) -> None:
        if not part.available:
            parts.append(f"[bold]{title}[/bold]: [red]unavailable[/red] - "
                         f"{escape(part.reason or '')}")
            return
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        parts.append(table)
        parts.extend(f"  [yellow]warning:[/yellow] {escape(w)}" for w in part.warnings)

    colours = {"healthy": "green", "reachable": "green", "stopped": "yellow"}
    section(f"servers (profile {report.profile})", report.servers,
            ("component", "state", "address", "version", "uptime", "pid"),
            [(s["name"], _coloured(s["state"], colours.get(s["state"], "red")), s["address"],
              s["version"], _format_uptime(s["uptime_seconds"]), str(s["pid"] or "-"))
             for s in report.servers.items])
    section("sources (scrapers)", report.sources,
            ("source", "last scrape", "newest snapshot", "records", "dead letters"),
            [(s["source"], _ago(s["last_scrape_at"], now), _ago(s["newest_snapshot_at"], now),
              str(s["records"]), _coloured(str(s["dlq_records"]),
                                           "red" if s["dlq_records"] else "green"))
             for s in report.sources.items])
    section("connectors (Kafka Connect)", report.connectors,
            ("connector", "type", "state", "tasks"),
            [(c["connector"], str(c["type"]), _coloured(c["state"], _state_colour(c["state"])),
              ", ".join(f"{t['id']}:{t['state']}" for t in c["tasks"]) or "no tasks")
             for c in report.connectors.items])
    section("topics", report.topics, ("topic", "partitions", "end offsets", "consumers (lag)"),
            [(t["topic"], str(t["partitions"]), str(t["end_offset_total"]),
              ", ".join(f"{c['group']} {_lag(c['lag'])}" for c in t["consumers"]) or "-")
             for t in report.topics.items])
    freshness_colours = {"fresh": "green", "stale": "red", "no data": "yellow",
                         "missing": "yellow"}
    section("tables", report.tables,
            ("table", "version", "last commit", "rows", "+rows 1h", "quarantined", "freshness"),
            [(t["table"], _none(t["version"]), _ago(t["last_commit_at"], now),
              _none(t["rows"]), _none(t["rows_added_last_hour"]) +
              ("+" if t["rows_added_at_least"] else ""), _none(t["quarantined_rows"]),
              _coloured(_freshness_text(t), freshness_colours.get(t["freshness"], "dim")))
             for t in report.tables.items])
    return Group(*parts)


def _coloured(text: str, colour: str) -> str:
    return f"[{colour}]{escape(text)}[/{colour}]"


def _state_colour(state: str) -> str:
    return {"running": "green", "paused": "yellow"}.get(state, "red")


def _none(value: object) -> str:
    return "-" if value is None else str(value)


def _lag(lag: int | None) -> str:
    if lag is None:
        return "(no position)"
    return "[green](0)[/green]" if lag == 0 else f"[red]({lag})[/red]"


def _ago(moment: float | None, now: float) -> str:
    if moment is None:
        return "-"
    return f"{_format_uptime(max(now - moment, 0))} ago"


def _freshness_text(table: dict) -> str:
    if table["error"]:
        return f"unreadable: {table['error'][:80]}"
    if table["freshness"] in ("fresh", "stale"):
        return (f"{table['freshness']} ({_format_uptime(table['age_seconds'])} old, limit "
                f"{table['stale_after_minutes']:g} min)")
    return table["freshness"]


def _print_status(stack: Stack, as_json: bool) -> bool:
    """The servers' table (or JSON list); whether every server is up."""
    rows = stack.status()
    if as_json:
        click.echo(json.dumps([row.__dict__ for row in rows], indent=2))
    else:
        table = Table(title=f"lakehouse stack (profile {stack.settings.profile})")
        for column in ("component", "state", "address", "version", "uptime", "pid"):
            table.add_column(column)
        colours = {"healthy": "green", "reachable": "green", "stopped": "yellow"}
        for row in rows:
            colour = colours.get(row.state, "red")
            table.add_row(row.name, f"[{colour}]{row.state}[/{colour}]", row.address,
                          row.version, _format_uptime(row.uptime_seconds),
                          str(row.pid or "-"))
        Console().print(table)
    return all(row.state in ("healthy", "reachable") for row in rows)


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def clean(ctx: click.Context, yes: bool) -> None:
    """Stop the stack and delete the state folder (data, logs, binaries)."""
    settings = _settings(ctx)
    stack = Stack(settings)
    if not yes:
        click.confirm(f"Stop the stack and delete {settings.state_path}?", abort=True)
    stack.down(_say)
    postgres = stack.component("postgres")
    assert isinstance(postgres, Postgres)
    postgres.remove_data()
    shutil.rmtree(settings.state_path, ignore_errors=True)
    _say(f"removed {settings.state_path}")


@cli.group()
def config() -> None:
    """Inspect the resolved configuration."""


@config.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Print the active profile's settings (secrets masked) as JSON."""
    settings = _settings(ctx)
    click.echo(settings.model_dump_json(indent=2))


@cli.command()
@click.option("--topic", "topics", multiple=True,
              help="Topic to ingest (repeatable). Default: every topic with the configured "
                   "kafka.topic_prefix.")
@click.option("--continuous", is_flag=True,
              help="Keep running on a processing-time trigger until Ctrl-C/SIGTERM "
                   "(default: catch up with availableNow, then exit).")
@click.option("--interval", default="10 seconds", show_default=True,
              help="Trigger interval in continuous mode.")
@click.option("--max-offsets-per-trigger", type=int, default=None,
              help="Cap on records per micro-batch (all partitions together).")
@click.pass_context
def bronze(ctx: click.Context, topics: tuple[str, ...], continuous: bool, interval: str,
           max_offsets_per_trigger: int | None) -> None:
    """Kafka topics -> bronze_<topic> Delta tables (raw, append-only, exactly once)."""
    from spark_streaming import bronze as job
    from spark_streaming.session import build_spark_session

    settings = _settings(ctx)
    chosen = list(topics) or _prefixed_topics(settings)
    if not chosen:
        raise click.UsageError(f"no topics given and none start with "
                               f"{settings.kafka.topic_prefix!r}")
    _say(f"bronze: {', '.join(chosen)} -> {settings.tables_uri}")
    spark = build_spark_session(settings, app_name="lakehouse-bronze")
    try:
        with job.stop_on_signals() as stop:
            if continuous:
                job.run_continuous(spark, settings, chosen, _say, stop, interval,
                                   max_offsets_per_trigger)
            else:
                totals = job.run_available_now(spark, settings, chosen, _say,
                                               max_offsets_per_trigger, stop)
                _say(f"bronze caught up: {json.dumps(totals)}")
    finally:
        spark.stop()


def _prefixed_topics(settings: Settings) -> list[str]:
    from infra.clients import kafka_admin

    topics = kafka_admin(settings).list_topics(timeout=10).topics
    return sorted(t for t in topics if t.startswith(settings.kafka.topic_prefix))


@cli.command()
@click.option("--until-caught-up", is_flag=True,
              help="Read every source once, drain bronze, silver and gold, then exit 0 "
                   "(what tests and CI use). Default: run until Ctrl-C/SIGTERM.")
@click.option("--interval", default="10 seconds", show_default=True,
              help="Trigger interval of the streaming queries (continuous mode).")
@click.option("--skip", type=click.Choice(["connectors", "rentals"]), multiple=True,
              help="Leave out a source (repeatable): Kafka Connect connectors, or the "
                   "rentals database traffic.")
@click.pass_context
def ingest(ctx: click.Context, until_caught_up: bool, interval: str,
           skip: tuple[str, ...]) -> None:
    """Run the pipeline: sources -> Kafka -> bronze/silver/gold Delta tables.

    Brings the embedded stack up if needed, applies table definitions and connectors,
    starts the feed simulator (embedded profile), the scrapers and the rentals traffic,
    and the streaming queries of every layer. Every step is idempotent.
    """
    from cli import ingest_service as service
    from spark_streaming.bronze import stop_on_signals
    from spark_streaming.session import build_spark_session

    settings = _settings(ctx)
    options = service.IngestOptions(until_caught_up=until_caught_up,
                                    trigger_interval=interval, skip=set(skip))
    began = time.monotonic()
    try:
        service.prepare(settings, options, _say)
        with contextlib.ExitStack() as resources:
            service.start_simulator(settings, resources, _say)
            spark = build_spark_session(settings, app_name="lakehouse-ingest")
            resources.callback(spark.stop)
            # After the session: pyspark installs its own SIGINT handler (cancel every job,
            # raise KeyboardInterrupt) when the context starts; ours stops queries cleanly.
            stop = resources.enter_context(stop_on_signals())
            if until_caught_up:
                results = service.catch_up(spark, settings, options, _say)
                for layer, tables in results.items():
                    for table, figures in sorted(tables.items()):
                        _say(f"{layer}: {table}: {figures}")
                _say(f"[green]ingest caught up[/green] in {time.monotonic() - began:.0f} s")
            else:
                _say("ingest running; Ctrl-C stops every query (an interrupted micro-batch is "
                     "redone exactly once on the next start)")
                service.run_forever(spark, settings, options, _say, stop)
                _say("ingest stopped cleanly")
    except service.IngestError as exc:
        console.print(f"[red]ingest failed:[/red] {exc}")
        sys.exit(1)


cli.add_command(connectors)
cli.add_command(rentals)
cli.add_command(scrape)
cli.add_command(simulator)
cli.add_command(tables)
cli.add_command(topics)
cli.add_command(kafka)
cli.add_command(maintain)
cli.add_command(silver)
cli.add_command(gold)
cli.add_command(transform)
cli.add_command(docs)
cli.add_command(notebooks)


def main() -> None:
    try:
        cli(obj={})
    except (ConfigError, SetupError, StackError) as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(2)
    except TableBusy as exc:
        console.print("[red]refused:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(3)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
