"""The planted history: weather, trips and station occupancy of any past hour, the same
for the same seed, so an analysis has something true to find.

Weather (at a place, per UTC hour; the live forecast and the archive share it):
- temperature: a seasonal mean (about 1 °C mid-January to 19 °C mid-July), a day-to-day
  swing of +-5 °C and a daily cycle of +-4 °C (coldest near 03:00, warmest near 15:00);
- rain: a day is rainy with probability RAINY_DAY_SHARE (0.3); on a rainy day each hour
  rains 0.5-3.0 mm with probability 0.7; a dry day has no precipitation at all.

Demand (trips started per station and UTC hour, drawn Poisson from this expectation):
  BASE_TRIPS_PER_STATION_HOUR x station weight (0.5-1.5) x rhythm(weekday, hour)
  x RAIN_FACTOR (0.45) when the hour's precipitation is >= RAIN_THRESHOLD_MM (0.5)
  x cold factor max(0.3, 1 - COLD_FACTOR_PER_DEGREE (0.04) x (15 - temperature)) below 15 °C
- rhythm: weekdays peak at 08:00 and 17:00-18:00 (rush hours), weekends have one midday
  hump; WEEKDAY_FACTORS scales each day of the week (Sunday lowest).
So, per day: a rainy day has about 40 % fewer trips than a dry day of the same weekday,
and each degree colder (below 15 °C) about 4 % fewer.

Station occupancy (GBFS station_status history, per instant): a docked station's share of
bikes moves with the same rhythm and weather, centre stations filling in the rush hours
and outer ones emptying.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

RAINY_DAY_SHARE = 0.3
RAIN_THRESHOLD_MM = 0.5
RAIN_FACTOR = 0.45
COLD_BELOW_C = 15.0
COLD_FACTOR_PER_DEGREE = 0.04
BASE_TRIPS_PER_STATION_HOUR = 2.0
# Monday .. Sunday
WEEKDAY_FACTORS = (1.0, 1.0, 1.0, 1.0, 1.05, 0.9, 0.75)
_WEEKDAY_HOURS = (0.1, 0.05, 0.03, 0.03, 0.05, 0.2, 0.6, 1.6, 2.4, 1.3, 0.8, 0.8,
                  1.0, 0.9, 0.8, 0.9, 1.3, 2.2, 2.0, 1.2, 0.8, 0.6, 0.4, 0.2)
_WEEKEND_HOURS = (0.2, 0.15, 0.1, 0.05, 0.05, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0, 1.3,
                  1.5, 1.6, 1.6, 1.5, 1.3, 1.1, 0.9, 0.7, 0.5, 0.4, 0.3, 0.25)
TRIPS_CSV_HEADER = ("trip_id,bike_id,start_station_id,end_station_id,started_at,ended_at,"
                    "price_cents")


def weather_at(seed: int, latitude: float, longitude: float, hour: int) -> dict[str, float]:
    """Open-Meteo's hourly variables at a place for the UTC hour starting at `hour` (epoch s)."""
    hour -= hour % 3600
    day = datetime.fromtimestamp(hour, UTC)
    day_rng = random.Random(f"{seed}:{hour // 86400}")
    swing = day_rng.uniform(-5, 5)
    rainy_day = day_rng.random() < RAINY_DAY_SHARE
    rng = random.Random(f"{seed}:{latitude:.2f}:{longitude:.2f}:{hour}")
    season = 10 - 9 * math.cos(2 * math.pi * (day.timetuple().tm_yday - 15) / 365)
    diurnal = -math.cos((day.hour - 3) / 24 * 2 * math.pi)
    rain = rainy_day and rng.random() < 0.7
    precipitation = round(rng.uniform(0.5, 3.0), 1) if rain else 0.0
    return {
        "temperature_2m": round(season + swing + 4 * diurnal + rng.uniform(-0.5, 0.5), 1),
        "relative_humidity_2m": int(min(100, max(25, (92 if rain else 70) - 15 * diurnal
                                                 + rng.uniform(-5, 5)))),
        "precipitation": precipitation,
        "wind_speed_10m": round(abs(rng.gauss(8, 4)), 1),
        "weather_code": 61 if rain else rng.choice((0, 1, 2, 3)),
    }


def rhythm(moment: datetime) -> float:
    """Relative demand of the UTC hour of `moment` (weekday profile x day factor)."""
    weekday = moment.weekday()
    hours = _WEEKEND_HOURS if weekday >= 5 else _WEEKDAY_HOURS
    return hours[moment.hour] * WEEKDAY_FACTORS[weekday]


def weather_factor(seed: int, latitude: float, longitude: float, at: int) -> float:
    """What the weather of the hour of `at` does to demand: RAIN_FACTOR and the cold factor."""
    weather = weather_at(seed, latitude, longitude, at)
    rain = RAIN_FACTOR if weather["precipitation"] >= RAIN_THRESHOLD_MM else 1.0
    cold = COLD_BELOW_C - weather["temperature_2m"]
    return rain * (max(0.3, 1 - COLD_FACTOR_PER_DEGREE * cold) if cold > 0 else 1.0)


@dataclass(frozen=True)
class Place:
    """The system's weather location and its stations and bikes (ids as the rentals
    database spells them, so trips and rentals count together)."""

    seed: int
    latitude: float
    longitude: float
    station_ids: tuple[str, ...]
    bike_ids: tuple[str, ...]


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's draw; the means here are small (a few trips per station-hour)."""
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def _station_weight(seed: int, station_id: str) -> float:
    return random.Random(f"{seed}:weight:{station_id}").uniform(0.5, 1.5)


def trips_of_day(place: Place, day: date) -> Iterator[str]:
    """The CSV lines (no header) of the trips started on `day`, ids `trip-<yyyymmdd>-<n>`."""
    number = 0
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    for hour in range(24):
        moment = start + timedelta(hours=hour)
        expected = rhythm(moment) * weather_factor(place.seed, place.latitude,
                                                   place.longitude, int(moment.timestamp()))
        for station in place.station_ids:
            rng = random.Random(f"{place.seed}:trips:{station}:{int(moment.timestamp())}")
            mean = BASE_TRIPS_PER_STATION_HOUR * _station_weight(place.seed, station) * expected
            for _ in range(_poisson(rng, mean)):
                number += 1
                started = moment + timedelta(seconds=rng.randrange(3600))
                minutes = min(90.0, 4 + rng.expovariate(1 / 12))
                ended = started + timedelta(seconds=int(minutes * 60))
                end_station = rng.choice(place.station_ids)
                yield (f"trip-{day:%Y%m%d}-{number:05d},{rng.choice(place.bike_ids)},{station},"
                       f"{end_station},{started:%Y-%m-%dT%H:%M:%S},{ended:%Y-%m-%dT%H:%M:%S},"
                       f"{100 + 5 * int(minutes)}")


def occupancy(seed: int, station_id: str, centre: bool, latitude: float, longitude: float,
              at: int) -> float:
    """Share of a docked station's capacity holding bikes at instant `at` (0..1)."""
    moment = datetime.fromtimestamp(at, UTC)
    base = random.Random(f"{seed}:occupancy:{station_id}").uniform(0.35, 0.65)
    flow = rhythm(moment) / max(_WEEKDAY_HOURS) * weather_factor(seed, latitude, longitude, at)
    noise = random.Random(f"{seed}:occupancy:{station_id}:{at}").uniform(-0.05, 0.05)
    return min(1.0, max(0.0, base + (0.3 if centre else -0.3) * flow + noise))
