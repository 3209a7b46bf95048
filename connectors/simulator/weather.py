"""Open-Meteo `/v1/forecast` and `/v1/archive` answers with hourly values, deterministic
for seed and place (the values are the planted history's, `history.weather_at`)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from connectors.simulator.history import weather_at

UNITS = {
    "temperature_2m": "°C",
    "relative_humidity_2m": "%",
    "precipitation": "mm",
    "wind_speed_10m": "km/h",
    "weather_code": "wmo code",
}


class WeatherRequestError(ValueError):
    """A request Open-Meteo would answer with HTTP 400 and a reason."""


def _float_param(params: dict[str, str], name: str) -> float:
    if name not in params:
        raise WeatherRequestError(f"Parameter '{name}' is required")
    try:
        return float(params[name])
    except ValueError as exc:
        raise WeatherRequestError(f"Parameter '{name}' is not a number") from exc


def _variables(params: dict[str, str]) -> list[str]:
    variables = [v for v in params.get("hourly", "").split(",") if v]
    unknown = [v for v in variables if v not in UNITS]
    if unknown:
        raise WeatherRequestError(f"Cannot initialize WeatherVariable from invalid String "
                                  f"value {unknown[0]}")
    return variables


def _hourly_body(params: dict[str, str], seed: int, hours: list[int]) -> dict[str, Any]:
    """The document both endpoints answer: `hourly` values of the asked variables."""
    latitude = _float_param(params, "latitude")
    longitude = _float_param(params, "longitude")
    variables = _variables(params)
    rows = [weather_at(seed, latitude, longitude, hour) for hour in hours]
    hourly: dict[str, Any] = {"time": [_iso_minute(h) for h in hours]}
    for variable in variables:
        hourly[variable] = [row[variable] for row in rows]
    return {
        "latitude": latitude,
        "longitude": longitude,
        "generationtime_ms": 0.1,
        "utc_offset_seconds": 0,
        "timezone": "GMT",
        "timezone_abbreviation": "GMT",
        "elevation": 375.0,
        "hourly_units": {"time": "iso8601", **{v: UNITS[v] for v in variables}},
        "hourly": hourly,
    }


def forecast(params: dict[str, str], seed: int, now: int) -> dict[str, Any]:
    """The forecast document for query `params` at simulated time `now` (epoch seconds)."""
    past_days = int(params.get("past_days", "0"))
    forecast_days = int(params.get("forecast_days", "1"))
    day_start = now - now % 86400 - past_days * 86400
    hours = [day_start + i * 3600 for i in range(24 * (past_days + forecast_days))]
    body = _hourly_body(params, seed, hours)
    current = [v for v in params.get("current", "").split(",") if v in UNITS]
    if "current" in params:
        # Like Open-Meteo: `current` is the latest 15-minute step, present only when asked.
        step = now - now % 900
        values = weather_at(seed, body["latitude"], body["longitude"], step)
        body["current_units"] = {"time": "iso8601", "interval": "seconds",
                                 **{v: UNITS[v] for v in current}}
        body["current"] = {"time": _iso_minute(step), "interval": 900,
                           **{v: values[v] for v in current}}
    return body


def _date_param(params: dict[str, str], name: str) -> date:
    if name not in params:
        raise WeatherRequestError(f"Parameter '{name}' is required")
    try:
        return date.fromisoformat(params[name])
    except ValueError as exc:
        raise WeatherRequestError(f"Parameter '{name}' is not a date (yyyy-mm-dd)") from exc


def archive(params: dict[str, str], seed: int, now: int) -> dict[str, Any]:
    """Open-Meteo's historical-weather answer: every hour of start_date..end_date (UTC),
    which must lie before the simulated day `now` (at most 366 days at once)."""
    first, last = _date_param(params, "start_date"), _date_param(params, "end_date")
    today = datetime.fromtimestamp(now, UTC).date()
    if last < first or last >= today or (last - first).days > 365:
        raise WeatherRequestError(f"Parameter 'start_date' and 'end_date' must be a range of "
                                  f"at most 366 days before {today}")
    start = int(datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp())
    hours = [start + i * 3600 for i in range(24 * ((last - first).days + 1))]
    return _hourly_body(params, seed, hours)


def _iso_minute(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M")
