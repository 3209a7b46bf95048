"""`lakehouse backfill`: past days of history entering through the same front doors as
live data, so the streaming jobs carry them through bronze, silver and gold.

- trips: a CSV append per day (header, then the day's trips of `history.trips_of_day`)
  to the file the FileStream source connector tails (its `file`, as the connector file
  resolves it);
- weather: each day's hours from every Open-Meteo source with an `archive_url`, through
  the weather scraper's own path (fetch, validate, produce, dead letters);
- station status: every GBFS source's station_status at each instant of the day
  `scraper.backfill_step_seconds` apart (default 15 minutes;
  `station_status.json?at=<epoch>`), through the GBFS scraper's path.

Idempotent: what was produced is marked per source and day in the scrapers' state folder
(`<scraper.state_dir>/backfill.json`, a mark is set only once the broker acknowledged or
the file append is done), so a second backfill of the same days adds nothing and an
interrupted one resumes where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from connectors.connect_config import CONNECTORS_DIR, load_connector_dir
from connectors.rentals.database import bike_id, station_id
from connectors.scrapers.scheduler import Scraper, SourceProgress
from connectors.scrapers.source_config import Source, load_sources
from connectors.scrapers.state import SourceState
from connectors.simulator.history import TRIPS_CSV_HEADER, Place, trips_of_day
from settings import ConfigError, Settings
from settings.report import Report

STATE_NAME = "backfill"
TRIPS_TOPIC = "trips_csv"


class BackfillError(ConfigError):
    """The backfill cannot run as configured; the message says what to change."""


@dataclass
class BackfillTotals:
    """What one backfill added (0 everywhere when the days were there already)."""

    days: list[str] = field(default_factory=list)
    trips: int = 0
    trip_lines: int = 0  # trips plus one header line per day appended
    weather_hours: int = 0
    station_statuses: int = 0
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if k != "errors"})


def past_days(count: int, today: date | None = None) -> list[date]:
    """The `count` whole UTC days before `today` (default: today), oldest first."""
    today = today or datetime.now(UTC).date()
    return [today - timedelta(days=back) for back in range(count, 0, -1)]


def trips_drop_file(settings: Settings) -> Path:
    """The file the FileStream connector writing `<prefix>trips_csv` tails."""
    topic = settings.kafka.topic(TRIPS_TOPIC)
    for connector in load_connector_dir(CONNECTORS_DIR, settings):
        if connector.config.get("topic") == topic and "file" in connector.config:
            return Path(connector.config["file"])
    raise BackfillError(f"no connector file in {CONNECTORS_DIR} reads a file into {topic}")


def archived_weather(settings: Settings) -> list[Source]:
    """The enabled Open-Meteo sources with an archive_url: the weather backfilled."""
    return [s for s in load_sources(settings)
            if s.spec.type == "open_meteo" and s.spec.archive_url]


def history_place(settings: Settings) -> Place:
    """Where the trips happen: the first archived weather source's location (its weather
    moves the demand) and the rentals database's stations and bikes."""
    weather = archived_weather(settings)
    if not weather:
        raise BackfillError("no enabled open_meteo source with an archive_url in "
                            f"{settings.scraper.sources_dir}: the trips follow its weather")
    location = weather[0].spec.location
    assert location is not None
    rentals = settings.rentals
    return Place(settings.simulator.seed, location.latitude, location.longitude,
                 tuple(station_id(n) for n in range(1, rentals.stations + 1)),
                 tuple(bike_id(n) for n in range(1, rentals.bikes + 1)))


def _day_start(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


class Backfill:
    """One backfill run: the scrapers' fetcher and producers, the marks of what is done."""

    def __init__(self, settings: Settings) -> None:
        self.weather = archived_weather(settings)
        self.gbfs = [s for s in load_sources(settings) if s.spec.type == "gbfs"]
        self.place = history_place(settings)
        self.drop = trips_drop_file(settings)
        self.state = SourceState(settings.scraper_state_path, STATE_NAME)
        self.step_seconds = settings.scraper.backfill_step_seconds
        self.scraper = Scraper(settings, self.weather + self.gbfs, state=self.state)

    def ensure_topics(self) -> list[str]:
        return self.scraper.ensure_topics()

    def close(self) -> None:
        self.scraper.close()

    def run(self, days: list[date], report: Report) -> BackfillTotals:
        totals = BackfillTotals()
        for day in days:
            trips, hours, statuses = self._trips(day), self._weather(day, totals), \
                self._station_statuses(day, totals)
            if trips or hours or statuses:
                totals.days.append(day.isoformat())
            totals.trips += trips
            totals.trip_lines += trips + (1 if trips else 0)
            totals.weather_hours += hours
            totals.station_statuses += statuses
            added = (f"{trips} trips, {hours} weather hours, {statuses} station statuses"
                     if trips or hours or statuses else "already there, nothing added")
            report(f"backfill {day} ({day:%a}): {added}")
            if totals.errors:
                break  # the next run resumes at this day
        return totals

    def _trips(self, day: date) -> int:
        mark = f"trips@{day}"
        if self.state.get(mark) is not None:
            return 0
        lines = list(trips_of_day(self.place, day))
        self.drop.parent.mkdir(parents=True, exist_ok=True)
        with self.drop.open("a") as file:  # one append per day: header, then the trips
            file.write("\n".join([TRIPS_CSV_HEADER, *lines]) + "\n")
        self.state.set(mark, len(lines))
        return len(lines)

    def _weather(self, day: date, totals: BackfillTotals) -> int:
        produced = 0
        for entry in self._entries(self.weather):
            result = entry.runner.backfill_weather(day, f"{entry.source.name}/weather@{day}")
            produced += result.produced
            totals.errors += [f"{entry.source.name} {day}: {e}" for e in result.errors]
        return produced

    def _station_statuses(self, day: date, totals: BackfillTotals) -> int:
        produced = 0
        start = _day_start(day)
        for entry in self._entries(self.gbfs):
            mark = f"{entry.source.name}/station_status@{day}"
            done = self.state.get(mark) or 0
            for at in range(start, start + 86400, self.step_seconds):
                if at <= done:
                    continue
                result = entry.runner.backfill_station_status(at, mark)
                produced += result.produced
                if result.errors:
                    totals.errors += [f"{entry.source.name} {day}: {e}" for e in result.errors]
                    break
        return produced

    def _entries(self, sources: list[Source]) -> list[SourceProgress]:
        names = {s.name for s in sources}
        return [p for p in self.scraper.progress if p.source.name in names]
