"""`lakehouse ingest --until-caught-up` end to end on the real embedded stack: the feed
simulator and PostgreSQL in, every Delta layer out."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow.compute as pc

from connectors.rentals.database import connect
from tests.conftest import IngestedLakehouse, read_delta


def test_ingest_until_caught_up_fills_every_layer(
    ingested_lakehouse: IngestedLakehouse,
) -> None:
    scoped, system = ingested_lakehouse.settings, ingested_lakehouse.system
    assert "ingest caught up" in ingested_lakehouse.output

    # silver: exactly the stations and statuses the feed served, at its last_updated
    served_at = datetime.fromtimestamp(system.now, UTC)
    statuses = read_delta(scoped, "silver_station_status")
    snapshot = statuses.filter(pc.equal(statuses["last_updated"], served_at))
    expected = {s.station_id: system.station_counts(s)["bikes"] for s in system.stations}
    got = dict(zip(snapshot["station_id"].to_pylist(),
                   snapshot["num_bikes_available"].to_pylist(), strict=True))
    assert got == expected
    assert snapshot.num_rows == len(expected), "a status was written twice"

    info = read_delta(scoped, "silver_station_information")
    current = info.filter(info["is_current"])
    assert sorted(current["station_id"].to_pylist()) == sorted(expected)

    vehicles = read_delta(scoped, "silver_vehicle_status")
    vehicle_snapshot = vehicles.filter(pc.equal(vehicles["last_updated"], served_at))
    assert sorted(vehicle_snapshot["vehicle_id"].to_pylist()) == sorted(
        v.vehicle_id for v in system.visible_vehicles())

    assert read_delta(scoped, "silver_weather_hourly").num_rows >= 1

    # rentals: the CDC current state equals the PostgreSQL table after the generated
    # inserts, updates and deletes
    rentals = read_delta(scoped, "silver_rentals", ["rental_id", "status", "end_station_id",
                                                "is_deleted"])
    live = rentals.filter(pc.invert(rentals["is_deleted"]))
    in_lake = set(zip(live["rental_id"].to_pylist(), live["status"].to_pylist(),
                      live["end_station_id"].to_pylist(), strict=True))
    with connect(scoped) as conn:
        in_postgres = set(conn.execute(
            "SELECT rental_id, status, end_station_id FROM rentals").fetchall())
    assert in_postgres, "the traffic generator made no rentals"
    assert in_lake == in_postgres

    # stations and bikes: the CDC current state equals their PostgreSQL tables
    with connect(scoped) as conn:
        pg_stations = set(conn.execute("SELECT station_id, name, capacity FROM stations"))
        pg_bikes = set(conn.execute("SELECT bike_id, status, station_id FROM bikes"))
    stations = read_delta(scoped, "silver_stations", ["station_id", "name", "capacity"])
    assert set(zip(*stations.to_pydict().values(), strict=True)) == pg_stations
    bikes = read_delta(scoped, "silver_bikes", ["bike_id", "status", "station_id"])
    assert set(zip(*bikes.to_pydict().values(), strict=True)) == pg_bikes

    # trips: the CSV lines dropped for the FileStream connector, header skipped, the short
    # line quarantined with the reason (earlier sessions' drops may be there too)
    trips = read_delta(scoped, "silver_trips", ["trip_id", "price_cents", "duration_seconds"])
    mine = {t: (p, d) for t, p, d in zip(*trips.to_pydict().values(), strict=True)
            if t in ingested_lakehouse.trips}
    assert sorted(mine) == sorted(ingested_lakehouse.trips)
    assert all(duration == 40 * 60 for _, duration in mine.values())
    quarantined = read_delta(scoped, "quarantine_trips", ["raw_value", "stage", "reason"])
    bad = [r for r in quarantined.to_pylist()
           if r["raw_value"] == ingested_lakehouse.bad_trip_line.encode()]
    assert len(bad) == 1 and bad[0]["stage"] == "parse"
    assert "CSV line has 3 fields, expected 7" in bad[0]["reason"]

    # gold: every metric has rows built from that silver data
    availability = read_delta(scoped, "gold_station_availability_15min")
    assert set(availability["station_id"].to_pylist()) == set(expected)
    assert read_delta(scoped, "gold_system_utilisation_hourly").num_rows >= 1
    assert read_delta(scoped, "gold_rentals_daily_weather").num_rows >= 1
