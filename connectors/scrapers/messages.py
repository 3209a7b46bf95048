"""The message contract of the scraper topics: field lists, keys and the Kafka record."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Fields of each feed's JSON value, in order; silver tables are built on exactly these.
FIELDS: dict[str, tuple[str, ...]] = {
    "station_information": (
        "system_id", "station_id", "name", "short_name", "lat", "lon", "capacity", "address",
        "region_id", "last_updated", "gbfs_version"),
    "station_status": (
        "system_id", "station_id", "num_bikes_available", "num_docks_available",
        "num_bikes_disabled", "num_docks_disabled", "is_installed", "is_renting",
        "is_returning", "last_reported", "last_updated", "gbfs_version"),
    "vehicle_status": (
        "system_id", "vehicle_id", "lat", "lon", "is_reserved", "is_disabled",
        "vehicle_type_id", "current_range_meters", "station_id", "last_reported",
        "last_updated", "gbfs_version"),
    "weather": (
        "location_id", "latitude", "longitude", "time", "temperature_2m",
        "relative_humidity_2m", "precipitation", "wind_speed_10m", "weather_code"),
}
# The field whose value keys each feed's messages (one key per station, vehicle, place).
DEFAULT_KEYS = {"station_information": "station_id", "station_status": "station_id",
                "vehicle_status": "vehicle_id", "weather": "location_id"}
# Header of the records `lakehouse backfill` produces: history, old on purpose, so silver's
# lateness bound (which catches replayed or stuck live feeds) does not apply to them.
BACKFILL_HEADER = "backfill"
FEEDS_OF_TYPE = {"gbfs": ("station_information", "station_status", "vehicle_status"),
                 "open_meteo": ("weather",)}


@dataclass(frozen=True)
class Record:
    """One normalised entity of a snapshot: its feed, contract fields, and source timestamp."""

    feed: str
    value: dict[str, Any]
    last_updated: int


@dataclass(frozen=True)
class KafkaMessage:
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_kafka(record: Record, topic: str, key_field: str, source: str,
             fetched_at: str, backfill: bool = False) -> KafkaMessage:
    """Serialise a record: UTF-8 JSON value, key = the key field as text, standard headers
    (and BACKFILL_HEADER on history)."""
    key = record.value[key_field]
    return KafkaMessage(
        topic=topic,
        key=str(key).encode(),
        value=json.dumps(record.value, ensure_ascii=False, separators=(",", ":")).encode(),
        headers=[("source", source.encode()), ("feed", record.feed.encode()),
                 ("last_updated", str(record.last_updated).encode()),
                 ("fetched_at", fetched_at.encode()),
                 *([(BACKFILL_HEADER, b"true")] if backfill else [])],
    )
