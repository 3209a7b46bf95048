"""How daily rentals follow the weather, computed once for the `rentals_vs_weather` notebook
(which prints the verdict) and the tests (which assert it after a backfill).

The judgement is one least-squares fit over every judged day of the log of its rentals
against its weekday, its mean temperature and whether it rained: the rain's effect is the
change of a rainy day against a dry day of the same weekday and temperature, the
temperature's the change per degree on days of the same weekday and rain. Comparing raw
means of rainy and dry days per weekday instead lets the temperature decide: three weeks
hold one to three days of a weekday, and a cold dry day (in November a day can be 10 °C
colder than the next) can have fewer rentals than a mild rainy one, so a planted rain
effect of -40 % went unseen in some three-week windows. Those means stay as the
by-weekday table the notebook draws, beside the line over the dry days' temperatures.

The input is `marts.fct_rentals_daily` as pandas (one row per day). Days without weather
are left out, and so is the current UTC day (still running: a fraction of a day's
rentals). With fewer than `MIN_DAYS` days, or without both dry and rainy days, the effects
are not judged (None), and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_DAYS = 14  # every weekday at least twice
# an effect smaller than this share of a day's rentals is not called one
SMALLEST_EFFECT = 0.05
WEEKDAY_COLUMNS = ["weekday", "dry_days", "rainy_days", "dry_mean", "rainy_mean"]
COLUMNS = ["rental_date", "rentals_started", "temperature_mean_c", "is_rainy_day"]


@dataclass(frozen=True)
class EffectsFit:
    """The fit's effects as relative changes of a day's rentals."""

    rain_change: float  # rainy against dry, same weekday and temperature
    per_degree: float  # a degree warmer, same weekday and rain


@dataclass(frozen=True)
class WeatherEffects:
    daily: pd.DataFrame  # the days judged: the input's rows, with weekday and rainy columns
    by_weekday: pd.DataFrame  # WEEKDAY_COLUMNS, Monday first
    temperature_fit: tuple[float, float] | None  # dry days: (rentals per degree, intercept)
    fit: EffectsFit | None  # None: too few days, or no dry or no rainy day

    @property
    def days(self) -> int:
        return len(self.daily)

    @property
    def comparable(self) -> pd.DataFrame:
        """The weekdays that had at least one dry and one rainy day."""
        table = self.by_weekday
        return table[(table.dry_days > 0) & (table.rainy_days > 0)]

    @property
    def judged(self) -> bool:
        return self.fit is not None

    @property
    def weekdays_lower_when_rainy(self) -> int:
        """The comparable weekdays whose rainy days averaged fewer rentals than dry ones."""
        return int((self.comparable.rainy_mean < self.comparable.dry_mean).sum())

    @property
    def rain_change(self) -> float | None:
        """A rainy day's rentals against a dry day's of the same weekday and temperature."""
        return None if self.fit is None else self.fit.rain_change

    @property
    def rain_lowers_rentals(self) -> bool | None:
        if self.fit is None:
            return None
        return self.fit.rain_change < -SMALLEST_EFFECT

    @property
    def warmth_raises_rentals(self) -> bool | None:
        if self.fit is None:
            return None
        return self.fit.per_degree > 0

    def verdict(self) -> str:
        if self.fit is None:
            rainy = int(self.daily.rainy.sum()) if self.days else 0
            return (f"{self.days} day(s) with weather, {rainy} of them rainy: too few to "
                    f"judge the weather's effect (it needs at least {MIN_DAYS} days, dry and "
                    "rainy ones; `lakehouse backfill` loads three weeks of history).")
        rain = "have fewer" if self.rain_lowers_rentals else "do NOT have fewer"
        trend = "more" if self.fit.per_degree > 0 else "fewer"
        return "\n".join([
            f"{self.days} days with weather, {int(self.daily.rainy.sum())} of them rainy.",
            f"Rain: rainy days {rain} rentals than dry days of the same weekday and "
            f"temperature ({self.fit.rain_change:+.0%}; by the raw means, fewer on "
            f"{self.weekdays_lower_when_rainy} of {len(self.comparable)} weekdays with both).",
            f"Temperature: warmer days have {trend} rentals ({self.fit.per_degree:+.1%} a "
            "degree C, same weekday and rain)."])


def weather_effects(daily: pd.DataFrame) -> WeatherEffects:
    """The effects in `daily` (the columns of COLUMNS, one row per day)."""
    days = daily.dropna(subset=["temperature_mean_c", "is_rainy_day"])
    days = days[pd.to_datetime(days.rental_date) < pd.Timestamp.now("UTC").normalize()
                .tz_localize(None)].copy()
    dates = pd.to_datetime(days.rental_date)
    days["weekday_number"] = dates.dt.day_of_week  # Monday = 0
    days["weekday"] = dates.dt.day_name()
    days["rainy"] = days.is_rainy_day.astype(bool)
    rows = [_dry_and_rainy(weekday, group)
            for (_, weekday), group in days.groupby(["weekday_number", "weekday"])]
    by_weekday = pd.DataFrame(rows, columns=WEEKDAY_COLUMNS)
    dry = days[~days.rainy]
    line = None
    if dry.temperature_mean_c.nunique() >= 2:
        slope, intercept = np.polyfit(dry.temperature_mean_c.astype(float),
                                      dry.rentals_started.astype(float), 1)
        line = (float(slope), float(intercept))
    return WeatherEffects(daily=days, by_weekday=by_weekday, temperature_fit=line,
                          fit=_fit(days))


def _fit(days: pd.DataFrame) -> EffectsFit | None:
    """log(rentals) = weekday's level + b_t x temperature + b_r x rainy, least squares."""
    rainy = days.rainy.to_numpy(dtype=float)
    if len(days) < MIN_DAYS or not 0 < rainy.sum() < len(days) or \
            (days.rentals_started <= 0).any():
        return None
    weekdays = days.weekday_number.to_numpy()
    levels = [(weekdays == number).astype(float) for number in sorted(set(weekdays))]
    design = np.column_stack([*levels, days.temperature_mean_c.to_numpy(dtype=float), rainy])
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    beta, *_ = np.linalg.lstsq(design, np.log(days.rentals_started.to_numpy(dtype=float)),
                               rcond=None)
    return EffectsFit(rain_change=float(np.expm1(beta[-1])),
                      per_degree=float(np.expm1(beta[-2])))


def _dry_and_rainy(weekday: str, group: pd.DataFrame) -> dict[str, object]:
    dry = group[~group.rainy].rentals_started
    rainy = group[group.rainy].rentals_started
    return {"weekday": weekday, "dry_days": len(dry), "rainy_days": len(rainy),
            "dry_mean": dry.mean() if len(dry) else np.nan,
            "rainy_mean": rainy.mean() if len(rainy) else np.nan}
