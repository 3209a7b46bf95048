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

    # gold: every metric has rows built from that silver data
    availability = read_delta(scoped, "gold_station_availability_15min")
    assert set(availability["station_id"].to_pylist()) == set(expected)
    assert read_delta(scoped, "gold_system_utilisation_hourly").num_rows >= 1
    assert read_delta(scoped, "gold_rentals_daily_weather").num_rows >= 1
