"""`lakehouse backfill` feeds history through the front doors (trip CSV file, weather and
GBFS scrapers), counted layer by layer in the session's shared ingest; a second backfill
adds nothing. That `lakehouse replay` rebuilds silver and gold from bronze to the same rows
as the incremental run is proven by tests/test_cluster.py, whose oracle is that replay (on
`local[2]`) of the bronze its cluster ingest wrote."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from connectors.backfill import history_place, trips_drop_file
from connectors.simulator.history import trips_of_day
from tests.conftest import BACKFILLED_TOPICS, IngestedLakehouse, backfill, read_delta


def _window(data: pa.Table, before: dict[int, int], after: dict[int, int] | None) -> list:
    """(partition, offset) of the bronze rows between two partition-end marks."""
    return [(p, o) for p, o in zip(data["partition"].to_pylist(), data["offset"].to_pylist(),
                                   strict=True)
            if o >= before.get(p, 0) and (after is None or o < after.get(p, 0))]


def test_backfilled_days_reach_every_layer_exactly_once(
        ingested_lakehouse: IngestedLakehouse) -> None:
    scoped, done = ingested_lakehouse.settings, ingested_lakehouse.backfilled
    place = history_place(scoped)
    trips = {day: list(trips_of_day(place, day)) for day in done.days}
    lines = {line for day_lines in trips.values() for line in day_lines}
    assert done.totals == {"days": [d.isoformat() for d in done.days], "trips": len(lines),
                           "trip_lines": len(lines) + len(done.days),
                           "weather_hours": 24 * len(done.days),
                           "station_statuses": len(ingested_lakehouse.system.stations)
                           * (86400 // scoped.scraper.backfill_step_seconds)
                           * len(done.days)}

    # bronze: what the scrapers produced, each record once
    for topic, produced in (("weather", done.totals["weather_hours"]),
                            ("station_status", done.totals["station_statuses"])):
        rows = _window(read_delta(scoped, f"bronze_bikes_{topic}", ["partition", "offset"]),
                       done.before[topic], done.after[topic])
        assert len(rows) == len(set(rows)) == produced, topic
    # the trip lines Connect read from the file (after the ingest began), each once
    bronze = read_delta(scoped, "bronze_bikes_trips_csv", ["value", "partition", "offset"])
    after_mark = set(_window(bronze, done.before["trips_csv"], None))
    delivered = Counter(value.decode() for value, p, o in zip(
        *(bronze[c].to_pylist() for c in ("value", "partition", "offset")), strict=True)
        if (p, o) in after_mark and value.decode() in lines)
    assert len(delivered) == len(lines) and set(delivered.values()) == {1}

    # silver: every trip, hour and status, keyed once
    first = datetime(*done.days[0].timetuple()[:3], tzinfo=UTC)
    end = datetime(*done.days[-1].timetuple()[:3], tzinfo=UTC) + timedelta(days=1)
    trip_ids = {line.split(",", 1)[0] for line in lines}
    silver_trips = read_delta(scoped, "silver_trips", ["trip_id"])["trip_id"].to_pylist()
    kept = Counter(t for t in silver_trips if t in trip_ids)
    assert set(kept) == trip_ids and set(kept.values()) == {1}
    hours = read_delta(scoped, "silver_weather_hourly", ["location_id", "observed_at"])
    hour_keys = Counter(key for key in zip(hours["location_id"].to_pylist(),
                                           hours["observed_at"].to_pylist(), strict=True)
                        if first <= key[1] < end)
    assert len(hour_keys) == done.totals["weather_hours"] and set(hour_keys.values()) == {1}
    statuses = read_delta(scoped, "silver_station_status", ["station_id", "last_updated"])
    status_keys = Counter(key for key in zip(statuses["station_id"].to_pylist(),
                                             statuses["last_updated"].to_pylist(), strict=True)
                          if first <= key[1] < end)
    assert len(status_keys) == done.totals["station_statuses"]
    assert set(status_keys.values()) == {1}

    # gold: the day's trips are its rentals, with a whole day of weather
    gold = read_delta(scoped, "gold_rentals_daily_weather").to_pylist()
    for day, day_lines in trips.items():
        rows = [r for r in gold if r["rental_date"] == day]
        assert sum(r["rentals_started"] for r in rows) == len(day_lines), day
        assert {r["weather_hours"] for r in rows} == {24}, day


def test_a_second_backfill_of_the_same_days_adds_nothing(
        ingested_lakehouse: IngestedLakehouse) -> None:
    settings, first = ingested_lakehouse.settings, ingested_lakehouse.backfilled
    drop = trips_drop_file(settings)
    size = drop.stat().st_size
    # the CLI serves the feeds itself
    again, output = backfill(settings, first.env, first.days)
    assert again.totals == {"days": [], "trips": 0, "trip_lines": 0, "weather_hours": 0,
                            "station_statuses": 0}
    assert output.count("already there, nothing added") == len(first.days)
    assert again.after == again.before, "a topic got records"
    assert set(again.before) == set(BACKFILLED_TOPICS)
    assert drop.stat().st_size == size, "the trip file grew"
