"""Open-Meteo hourly weather -> one record per hour and location (observed hours only)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from connectors.scrapers.gbfs import PayloadError
from connectors.scrapers.messages import FIELDS, Record
from connectors.scrapers.source_config import Location

VARIABLES = tuple(f for f in FIELDS["weather"]
                  if f not in ("location_id", "latitude", "longitude", "time"))


def request_params(location: Location, past_days: int) -> dict[str, str]:
    return {"latitude": str(location.latitude), "longitude": str(location.longitude),
            "hourly": ",".join(VARIABLES), "current": "temperature_2m",
            "past_days": str(past_days), "forecast_days": "1", "timezone": "GMT"}


def archive_params(location: Location, day: date) -> dict[str, str]:
    """Open-Meteo's historical-weather request (`/v1/archive`) for the hours of `day`."""
    return {"latitude": str(location.latitude), "longitude": str(location.longitude),
            "hourly": ",".join(VARIABLES), "start_date": day.isoformat(),
            "end_date": day.isoformat(), "timezone": "GMT"}


def _utc(text: str, offset_seconds: int) -> datetime:
    try:
        local = datetime.fromisoformat(text)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"hourly.time: not an ISO 8601 time: {text!r}") from exc
    return (local - timedelta(seconds=offset_seconds)).replace(tzinfo=UTC)


def observed_hours(document: Any, location: Location, now: datetime) -> list[Record]:
    """Hourly rows up to the current hour (the answer's `current.time`, else `now`)."""
    if not isinstance(document, dict) or not isinstance(document.get("hourly"), dict):
        raise PayloadError("not an Open-Meteo forecast: no `hourly` object")
    offset = document.get("utc_offset_seconds", 0)
    if not isinstance(offset, int):
        raise PayloadError(f"utc_offset_seconds: expected an integer, got {offset!r}")
    hourly = document["hourly"]
    times = hourly.get("time")
    if not isinstance(times, list):
        raise PayloadError("hourly.time: missing")
    for variable in VARIABLES:
        if not isinstance(hourly.get(variable), list) or len(hourly[variable]) != len(times):
            raise PayloadError(f"hourly.{variable}: missing or not one value per hour")
    current = document.get("current")
    cut = _utc(current["time"], offset) if isinstance(current, dict) and "time" in current \
        else now.astimezone(UTC).replace(tzinfo=UTC)
    cut = cut.replace(minute=0, second=0, microsecond=0)
    records = []
    for index, raw_time in enumerate(times):
        hour = _utc(raw_time, offset)
        if hour > cut:
            continue
        value = {"location_id": location.id, "latitude": location.latitude,
                 "longitude": location.longitude, "time": hour.strftime("%Y-%m-%dT%H:00"),
                 **{v: hourly[v][index] for v in VARIABLES}}
        records.append(Record(feed="weather", value=value,
                              last_updated=int(hour.timestamp())))
    return records
