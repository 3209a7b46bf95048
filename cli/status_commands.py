"""`lakehouse status`: the servers and the pipelines (sources, connectors, topics with their
consumers' lag, tables with their freshness), gathered by `cli.status_report` and drawn
here as tables, JSON or a live view."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.context import settings_of
from infra.stack import Stack

# Below this many terminal columns the tables leave out their secondary columns (version,
# pid, partitions, rows added in the last hour, ...) so each row stays on one line.
WIDE_COLUMNS = 120
# Columns a narrow layout leaves out, per section.
NARROW_LEAVES_OUT = {"servers": {"version", "pid"}, "sources": {"newest snapshot"},
                     "connectors": {"type"}, "topics": {"partitions"},
                     "tables": {"version", "+rows 1h", "quarantined"}}


def format_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


@click.command()
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
@click.option("--wide", is_flag=True,
              help=f"Every column, however wide the terminal (below {WIDE_COLUMNS} columns "
                   "the tables leave out version, pid, partitions, rows added in the last "
                   "hour and quarantined rows).")
@click.option("--timeout", type=click.FloatRange(min=0.5), default=4.0, show_default=True,
              help="Seconds the pipeline parts may take; a part not done by then shows as "
                   "unavailable (the servers are always waited for).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, watch: float | None, servers_only: bool,
           stale_after: tuple[str, ...], timeout: float, wide: bool) -> None:
    """Servers and pipelines: sources, connectors, topics with each consumer's lag (Spark
    queries included), tables with their last commit and freshness.

    A part that cannot be reached shows as unavailable with the reason. Exit codes: 0 every
    server is up; 1 a server is not up (the pipelines do not change the exit code).
    """
    settings = settings_of(ctx)
    if servers_only:
        sys.exit(0 if print_servers(Stack(settings), as_json, wide) else 1)
    thresholds = _thresholds(stale_after)
    from cli import status_report

    if watch is None:
        report = status_report.gather(settings, thresholds, timeout)
        if as_json:
            click.echo(json.dumps(report.as_dict(), indent=2, default=str))
        else:
            console = Console(highlight=False)
            console.print(_render_report(report, narrow=_narrow(console, wide)))
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
                live.update(_render_report(report, narrow=_narrow(out, wide)), refresh=True)
            elif as_json:  # one object a line
                click.echo(json.dumps(report.as_dict(), default=str))
            else:  # not a terminal (a file, a pipe): one report after another
                out.print(f"-- {time.strftime('%H:%M:%S')} --")
                out.print(_render_report(report, narrow=_narrow(out, wide)))
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


def _narrow(console: Console, wide: bool) -> bool:
    return not wide and console.width < WIDE_COLUMNS


def _render_report(report: object, narrow: bool = False) -> object:
    """The status as rich renderables, one table per section (`cli.status_report` data);
    `narrow` leaves out the secondary columns (NARROW_LEAVES_OUT)."""
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
        left_out = NARROW_LEAVES_OUT.get(title.split(" ", 1)[0], set()) if narrow else set()
        kept = [i for i, column in enumerate(columns) if column not in left_out]
        table = Table(title=title, title_justify="left",
                      box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
        for i in kept:  # names whole; the other cells fold when the row is too wide
            table.add_column(columns[i], overflow="fold", no_wrap=i == 0)
        for row in rows:
            table.add_row(*(row[i] for i in kept))
        parts.append(table)
        parts.extend(f"  [yellow]warning:[/yellow] {escape(w)}" for w in part.warnings)

    colours = {"healthy": "green", "reachable": "green", "stopped": "yellow"}
    section(f"servers (profile {report.profile})", report.servers,
            ("component", "state", "address", "version", "uptime", "pid"),
            [(s["name"], _coloured(s["state"], colours.get(s["state"], "red")), s["address"],
              s["version"], format_uptime(s["uptime_seconds"]), str(s["pid"] or "-"))
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
              _coloured(_freshness_text(t, narrow),
                        freshness_colours.get(t["freshness"], "dim")))
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
    return f"{format_uptime(max(now - moment, 0))} ago"


def _freshness_text(table: dict, narrow: bool = False) -> str:
    if table["error"]:
        return f"unreadable: {table['error'][:80]}"
    if narrow:  # the age is the last commit's; the limit is in --wide
        return str(table["freshness"])
    if table["freshness"] in ("fresh", "stale"):
        return (f"{table['freshness']} ({format_uptime(table['age_seconds'])} old, limit "
                f"{table['stale_after_minutes']:g} min)")
    return table["freshness"]


def print_servers(stack: Stack, as_json: bool, wide: bool = False) -> bool:
    """The servers' table (or JSON list); whether every server is up."""
    rows = stack.status()
    if as_json:
        click.echo(json.dumps([row.__dict__ for row in rows], indent=2))
    else:
        console = Console()
        narrow = _narrow(console, wide)
        columns = ("component", "state", "address", "version", "uptime", "pid")
        kept = [i for i, c in enumerate(columns)
                if not (narrow and c in NARROW_LEAVES_OUT["servers"])]
        table = Table(title=f"lakehouse stack (profile {stack.settings.profile})",
                      box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
        for i in kept:
            table.add_column(columns[i], overflow="fold", no_wrap=i == 0)
        colours = {"healthy": "green", "reachable": "green", "stopped": "yellow"}
        for row in rows:
            colour = colours.get(row.state, "red")
            cells = (row.name, f"[{colour}]{row.state}[/{colour}]", row.address, row.version,
                     format_uptime(row.uptime_seconds), str(row.pid or "-"))
            table.add_row(*(cells[i] for i in kept))
        console.print(table)
    return all(row.state in ("healthy", "reachable") for row in rows)


