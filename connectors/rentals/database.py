"""Schema and seed data of the rentals database (stations, bikes, rentals).

Both steps are idempotent: the schema uses IF NOT EXISTS / OR REPLACE, the seed inserts
with ON CONFLICT DO NOTHING, so running them again changes nothing (and emits no CDC event).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import psycopg

from settings import Settings
from settings.model import RentalsSettings

SCHEMA_FILE = Path(__file__).with_name("schema.sql")
TABLES = ("stations", "bikes", "rentals")
# Station coordinates scatter around this centre (a made-up city).
CITY_CENTRE = (52.52, 13.405)


def connect(settings: Settings, timeout: int = 5) -> psycopg.Connection:
    """A connection to the rentals database as the application's role `postgres.app_user`
    (owner of its tables, no superuser; autocommit, use conn.transaction() to group)."""
    return psycopg.connect(**settings.postgres.dsn_kwargs("app"), connect_timeout=timeout,
                           autocommit=True)


def station_id(number: int) -> str:
    """Station ids look like GBFS ones: 'station-1' .. 'station-<stations>'."""
    return f"station-{number}"


def bike_id(number: int) -> str:
    return f"bike-{number}"


@dataclass(frozen=True)
class SeedResult:
    stations_added: int
    bikes_added: int


def apply_schema(conn: psycopg.Connection) -> None:
    conn.execute(SCHEMA_FILE.read_text())


def _stations(config: RentalsSettings) -> list[tuple[str, str, float, float, int]]:
    rng = random.Random(config.seed)
    rows = []
    for number in range(1, config.stations + 1):
        lat = round(CITY_CENTRE[0] + rng.uniform(-0.04, 0.04), 6)
        lon = round(CITY_CENTRE[1] + rng.uniform(-0.07, 0.07), 6)
        rows.append((station_id(number), f"Station {number}", lat, lon,
                     rng.choice((10, 15, 20, 25, 30))))
    return rows


def _bikes(config: RentalsSettings) -> list[tuple[str, str, str]]:
    rng = random.Random(config.seed + 1)
    return [
        (bike_id(number), "electric" if rng.random() < 0.3 else "classic",
         station_id(rng.randint(1, config.stations)))
        for number in range(1, config.bikes + 1)
    ]


def seed(conn: psycopg.Connection, config: RentalsSettings) -> SeedResult:
    """Create the schema, then the stations and bikes that are missing (deterministic)."""
    with conn.transaction():
        apply_schema(conn)
        with conn.cursor() as cur:
            added = []
            for statement, rows in (
                ("INSERT INTO stations (station_id, name, lat, lon, capacity) "
                 "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING", _stations(config)),
                ("INSERT INTO bikes (bike_id, model, station_id) "
                 "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", _bikes(config)),
            ):
                count = 0
                for row in rows:
                    cur.execute(statement, row)
                    count += cur.rowcount
                added.append(count)
    return SeedResult(stations_added=added[0], bikes_added=added[1])
