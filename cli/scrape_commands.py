"""`lakehouse scrape` and `lakehouse simulator`: the HTTP scrapers and their local feed."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import click
from confluent_kafka import KafkaException
from rich.table import Table

from cli.context import settings_of
from cli.terminal import console, set_verbosity
from connectors.scrapers.scheduler import Scraper, SourceProgress
from connectors.scrapers.source_config import SourceConfigError, load_sources
from infra.ports import port_holder


def _clock(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch).strftime("%H:%M:%S")


def _line(entry: SourceProgress) -> str:
    report = entry.last
    assert report is not None
    colour = {"ok": "green", "unchanged": "cyan", "failed": "red"}[report.status]
    detail = "; ".join(report.errors or report.notes)
    return (f"[dim]{_clock(report.started_at)}[/dim] {entry.source.name}: "
            f"[{colour}]{report.status}[/{colour}], {report.produced} produced "
            f"({entry.produced} total), next run {_clock(entry.next_run)}"
            + (f" [dim]- {detail}[/dim]" if detail else ""))


def _summary(scraper: Scraper) -> Table:
    table = Table(title="scrapers")
    for column in ("source", "last fetch", "status", "produced", "dead-lettered", "next run"):
        table.add_column(column)
    for entry in scraper.progress:
        report = entry.last
        table.add_row(entry.source.name, _clock(report.started_at if report else None),
                      report.status if report else "-", str(entry.produced),
                      str(report.dead_lettered if report else 0), _clock(entry.next_run))
    return table


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by Ctrl-C or SIGTERM, so the loop can finish its source and flush."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, _frame: object) -> None:
        console.print(f"stopping ({signal.Signals(signum).name}): finishing the current "
                      f"source and flushing the producer")
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.command()
@click.option("--once", is_flag=True,
              help="Fetch each source once and exit (non-zero if any source failed).")
@click.option("--source", "names", multiple=True,
              help="Only this source (file name without .yaml); repeatable.")
@click.option("-v", "--verbose", is_flag=True, help="Log every fetch and retry.")
@click.pass_context
def scrape(ctx: click.Context, once: bool, names: tuple[str, ...], verbose: bool) -> None:
    """Poll the sources in scraper.sources_dir and produce their snapshots to Kafka."""
    if verbose:
        set_verbosity(verbose=True, quiet=False)
    settings = settings_of(ctx)
    try:
        sources = load_sources(settings)
    except SourceConfigError as exc:
        console.print("[red]error:[/red] ", end="")
        console.print(str(exc), markup=False)
        sys.exit(2)
    if names:
        unknown = sorted(set(names) - {s.name for s in sources})
        if unknown:
            raise click.UsageError(f"no enabled source named {', '.join(unknown)} "
                                   f"(known: {', '.join(s.name for s in sources)})")
        sources = [s for s in sources if s.name in names]
    if not sources:
        raise click.UsageError("no enabled sources")
    scraper = Scraper(settings, sources)
    try:
        try:
            created = scraper.ensure_topics()
        except KafkaException as exc:
            console.print(f"[red]error:[/red] cannot reach the broker at "
                          f"{settings.kafka.bootstrap_servers} to create the topics: {exc} "
                          f"(is the stack up? `lakehouse status`)")
            sys.exit(2)
        if created:
            console.print(f"created topics: {', '.join(created)}")
        console.print(f"scraping {len(sources)} source(s) -> {settings.kafka.bootstrap_servers}"
                      + ("" if once else " until Ctrl-C"))

        def show(entry: SourceProgress) -> None:
            console.print(_line(entry))

        if once:
            reports = scraper.run_once(show)
        else:
            with _stop_on_signals() as stop:
                scraper.run_forever(stop, show)
            reports = [p.last for p in scraper.progress if p.last is not None]
    finally:
        scraper.close()
    console.print(_summary(scraper))
    if once and any(r.failed for r in reports):
        failed = [r.source for r in reports if r.failed]
        console.print(f"[red]failed:[/red] {', '.join(failed)}")
        sys.exit(1)


@click.command()
@click.option("--host", default=None,
              help="Address to listen on (default: simulator.host of the profile, 127.0.0.1).")
@click.option("--port", type=int, default=None,
              help="Port (default: simulator.port of the profile).")
@click.option("--seed", type=int, default=None, help="Seed (default: simulator.seed).")
@click.option("--tick-interval", type=float, default=30.0, show_default=True,
              help="Seconds of wall time per simulation tick (statuses change each tick).")
@click.option("--ttl", type=int, default=30, show_default=True,
              help="GBFS ttl the feeds announce, in seconds.")
@click.pass_context
def simulator(ctx: click.Context, host: str | None, port: int | None, seed: int | None,
              tick_interval: float, ttl: int) -> None:
    """Serve a simulated GBFS 2.3/3.0 system and Open-Meteo weather until Ctrl-C.

    The embedded stack runs one as its `simulator` server (`lakehouse up`); this command
    serves one of your own, on another port or seed."""
    from connectors.simulator import FeedSimulator

    settings = settings_of(ctx)
    chosen_port = settings.simulator.port if port is None else port
    host = host or settings.simulator.host
    try:
        sim = FeedSimulator(port=chosen_port, host=host,
                            seed=settings.simulator.seed if seed is None else seed,
                            ttl=ttl, tick_interval=tick_interval)
    except OSError as exc:
        console.print(f"[red]error:[/red] cannot listen on {host}:"
                      f"{chosen_port} ({exc.strerror}; held by {port_holder(chosen_port)}); "
                      f"choose another with --port or simulator.port")
        sys.exit(2)
    console.print(f"feed simulator on {sim.url} (seed {sim.system.seed}, one tick per "
                  f"{tick_interval:g} s)\n"
                  f"  GBFS 3.0: {sim.url}/gbfs/3.0/gbfs.json\n"
                  f"  GBFS 2.3: {sim.url}/gbfs/2.3/gbfs.json\n"
                  f"  weather:  {sim.url}/v1/forecast?latitude=46.2&longitude=6.14"
                  f"&hourly=temperature_2m\n"
                  f"  history:  {sim.url}/v1/archive?...&start_date=..&end_date=.., "
                  f"{sim.url}/gbfs/3.0/station_status.json?at=<epoch>\n"
                  f"  control:  {sim.url}/control/status (POST /control/faults, /control/tick)")
    began = time.monotonic()
    with _stop_on_signals() as stop:
        server = threading.Thread(target=sim.serve_forever, daemon=True)
        server.start()
        while not stop.wait(0.5):
            pass
        sim.stop()
    console.print(f"simulator stopped after {time.monotonic() - began:.0f} s")
