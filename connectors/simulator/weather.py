"""Open-Meteo `/v1/forecast` answers with hourly values, deterministic for seed and place."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

UNITS = {
    "temperature_2m": "°C",
    "relative_humidity_2m": "%",
    "precipitation": "mm",
    "wind_speed_10m": "km/h",
    "weather_code": "wmo code",
}


class WeatherRequestError(ValueError):
    """A request Open-Meteo would answer with HTTP 400 and a reason."""


def _hour_values(seed: int, latitude: float, longitude: float, hour: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{latitude:.2f}:{longitude:.2f}:{hour}")
    hour_of_day = (hour // 3600) % 24
    # Coldest near 05:00, warmest near 15:00 UTC; a slow seasonal-looking drift by day.
    diurnal = -math.cos((hour_of_day - 3) / 24 * 2 * math.pi)
    day_offset = random.Random(f"{seed}:{hour // 86400}").uniform(-4, 4)
    precipitation = round(max(0.0, rng.gauss(-0.6, 0.8)), 1)
    code = 61 if precipitation >= 0.5 else 51 if precipitation > 0 else rng.choice((0, 1, 2, 3))
    return {
        "temperature_2m": round(9 + day_offset + 5 * diurnal + rng.uniform(-0.5, 0.5), 1),
        "relative_humidity_2m": int(min(100, max(25, 70 - 15 * diurnal + rng.uniform(-5, 5)))),
        "precipitation": precipitation,
        "wind_speed_10m": round(abs(rng.gauss(8, 4)), 1),
        "weather_code": code,
    }


def _float_param(params: dict[str, str], name: str) -> float:
    if name not in params:
        raise WeatherRequestError(f"Parameter '{name}' is required")
    try:
        return float(params[name])
    except ValueError as exc:
        raise WeatherRequestError(f"Parameter '{name}' is not a number") from exc


def forecast(params: dict[str, str], seed: int, now: int) -> dict[str, Any]:
    """The forecast document for query `params` at simulated time `now` (epoch seconds)."""
    latitude = _float_param(params, "latitude")
    longitude = _float_param(params, "longitude")
    variables = [v for v in params.get("hourly", "").split(",") if v]
    unknown = [v for v in variables if v not in UNITS]
    if unknown:
        raise WeatherRequestError(f"Cannot initialize WeatherVariable from invalid String "
                                  f"value {unknown[0]}")
    past_days = int(params.get("past_days", "0"))
    forecast_days = int(params.get("forecast_days", "1"))
    day_start = now - now % 86400 - past_days * 86400
    hours = [day_start + i * 3600 for i in range(24 * (past_days + forecast_days))]
    rows = [_hour_values(seed, latitude, longitude, hour) for hour in hours]
    hourly: dict[str, Any] = {"time": [_iso_minute(h) for h in hours]}
    for variable in variables:
        hourly[variable] = [row[variable] for row in rows]
    body: dict[str, Any] = {
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
    current = [v for v in params.get("current", "").split(",") if v in UNITS]
    if "current" in params:
        # Like Open-Meteo: `current` is the latest 15-minute step, present only when asked.
        step = now - now % 900
        values = _hour_values(seed, latitude, longitude, step - step % 3600)
        body["current_units"] = {"time": "iso8601", "interval": "seconds",
                                 **{v: UNITS[v] for v in current}}
        body["current"] = {"time": _iso_minute(step), "interval": 900,
                           **{v: values[v] for v in current}}
    return body


def _iso_minute(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M")
