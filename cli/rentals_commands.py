"""`lakehouse rentals ...`: the rentals database that Debezium captures (schema, seed, traffic)."""

from __future__ import annotations

import signal
import sys

import click
import psycopg

from cli.context import settings_of
from cli.terminal import console, say
from connectors.rentals.database import connect, seed
from connectors.rentals.traffic import run_traffic
from settings import Settings


def _connect(settings: Settings) -> psycopg.Connection:
    try:
        return connect(settings)
    except (psycopg.OperationalError, ValueError) as exc:
        pg = settings.postgres
        console.print(f"[red]cannot reach the rentals database[/red] "
                      f"{pg.app_user}@{pg.host}:{pg.port}/{pg.database}: ", end="")
        console.print(str(exc).strip(), markup=False)
        console.print("is the stack up (`lakehouse up`)?")
        sys.exit(1)


@click.group()
def rentals() -> None:
    """The rentals database (PostgreSQL): the source Debezium captures."""


@rentals.command("seed")
@click.pass_context
def seed_command(ctx: click.Context) -> None:
    """Create the schema and the stations and bikes (idempotent: a second run adds nothing)."""
    seed_rentals(settings_of(ctx))


def seed_rentals(settings: Settings) -> None:
    """`lakehouse rentals seed`'s body (SystemExit when the database is unreachable)."""
    with _connect(settings) as conn:
        result = seed(conn, settings.rentals)
    if result.stations_added or result.bikes_added:
        say(f"rentals seed: {result.stations_added} station(s) and "
             f"{result.bikes_added} bike(s) added")
    else:
        say("rentals seed: schema and seed data already in place, nothing added")


@rentals.command()
@click.pass_context
def provision(ctx: click.Context) -> None:
    """Create or correct the app and CDC roles, the database, its schema and publication.

    Runs as the administrator `postgres.user` (it needs CREATEROLE and REPLICATION, in
    practice a superuser); `lakehouse up` does it for the embedded PostgreSQL. Idempotent:
    a second run changes nothing.
    """
    provision_rentals(settings_of(ctx))


def provision_rentals(settings: Settings) -> None:
    """`lakehouse rentals provision`'s body (SystemExit 1 when it fails)."""
    from connectors.rentals.roles import provision as provision_roles

    try:
        changes = provision_roles(settings)
    except (psycopg.Error, ValueError) as exc:
        console.print("[red]rentals provision failed[/red]: ", end="")
        console.print(str(exc).strip(), markup=False)
        sys.exit(1)
    for change in changes:
        say(f"rentals provision: {change}")
    if not changes:
        say("rentals provision: roles, privileges and publication already in place, "
            "nothing changed")


@rentals.command()
@click.option("--rate", type=click.FloatRange(min=0.01, max=1000), default=None,
              help="Changes per second (default: rentals.traffic_rate_per_s).")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: run until Ctrl-C).")
@click.option("--events", type=click.IntRange(min=1), default=None,
              help="Stop after this many changes.")
@click.option("--seed", "seed_value", type=int, default=None,
              help="Random seed: the same seed on the same data gives the same changes "
                   "(default: rentals.seed).")
@click.pass_context
def traffic(ctx: click.Context, rate: float | None, duration: float | None,
            events: int | None, seed_value: int | None) -> None:
    """Start rentals (insert), end them (update) and cancel some (delete), at a steady rate.

    Seeds the database first if needed. Stops on Ctrl-C or SIGTERM after rolling back the
    change in flight, and prints what it did.
    """
    settings = settings_of(ctx)
    config = settings.rentals
    rate = rate or config.traffic_rate_per_s
    seed_value = config.seed if seed_value is None else seed_value

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with _connect(settings) as conn:
            seed(conn, config)
            limit = []
            if duration is not None:
                limit.append(f"{duration:g} s")
            if events is not None:
                limit.append(f"{events} change(s)")
            say(f"rentals traffic: {rate:g} change(s)/s, seed {seed_value}, "
                 f"until {' or '.join(limit) or 'Ctrl-C'}")
            counts = run_traffic(conn, config, rate=rate, seed=seed_value,
                                 duration=duration, events=events, report=say)
    finally:
        signal.signal(signal.SIGTERM, previous)
    say(f"rentals traffic done: {counts.summary()}")
