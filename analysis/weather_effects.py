"""How daily rentals follow the weather, computed once for the `rentals_vs_weather` notebook
(which prints the verdict) and the tests (which assert it after a backfill): rainy days
against dry days of the same weekday, and the rentals gained per degree on dry days.

The input is `marts.fct_rentals_daily` as pandas (one row per day). Days without weather
are left out, and so is the current UTC day (still running: a fraction of a day's
rentals). With fewer than `MIN_DAYS` days, or no weekday that had both a dry and a rainy
day, the effects are not judged (None), and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_DAYS = 14  # every weekday at least twice
WEEKDAY_COLUMNS = ["weekday", "dry_days", "rainy_days", "dry_mean", "rainy_mean"]
COLUMNS = ["rental_date", "rentals_started", "temperature_mean_c", "is_rainy_day"]


@dataclass(frozen=True)
class WeatherEffects:
    daily: pd.DataFrame  # the days judged: the input's rows, with weekday and rainy columns
    by_weekday: pd.DataFrame  # WEEKDAY_COLUMNS, Monday first
    temperature_fit: tuple[float, float] | None  # dry days: (rentals per degree, intercept)

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
        return self.days >= MIN_DAYS and not self.comparable.empty

    @property
    def weekdays_lower_when_rainy(self) -> int:
        """The comparable weekdays whose rainy days averaged fewer rentals than dry ones."""
        return int((self.comparable.rainy_mean < self.comparable.dry_mean).sum())

    @property
    def rain_lowers_rentals(self) -> bool | None:
        """Rainy days have fewer rentals than dry days of the same weekday: on average over
        the comparable weekdays, and on most of them. Not "on every one": a warm rainy day
        may beat a cold dry one, the temperature being an effect of its own."""
        if not self.judged:
            return None
        mostly = self.weekdays_lower_when_rainy * 2 > len(self.comparable)
        return bool(mostly and self.rain_change is not None and self.rain_change < 0)

    @property
    def rain_change(self) -> float | None:
        """Mean relative change of rainy against dry days over the comparable weekdays."""
        if self.comparable.empty:
            return None
        ratios = self.comparable.rainy_mean / self.comparable.dry_mean
        return float(ratios.mean() - 1)

    @property
    def warmth_raises_rentals(self) -> bool | None:
        if not self.judged or self.temperature_fit is None:
            return None
        return self.temperature_fit[0] > 0

    def verdict(self) -> str:
        if not self.judged:
            return (f"{self.days} day(s) with weather, {len(self.comparable)} weekday(s) with "
                    f"both dry and rainy days: too few to judge the weather's effect (it needs "
                    f"at least {MIN_DAYS} days and one weekday with both; "
                    "`lakehouse backfill` loads three weeks of history).")
        rain = "have fewer" if self.rain_lowers_rentals else "do NOT have fewer"
        lines = [f"{self.days} days with weather.",
                 f"Rain: rainy days {rain} rentals than dry days of the same weekday "
                 f"(fewer on {self.weekdays_lower_when_rainy} of {len(self.comparable)} "
                 f"weekdays compared, {self.rain_change:+.0%} on average)."]
        if self.temperature_fit is not None:
            slope = self.temperature_fit[0]
            trend = "more" if slope > 0 else "fewer"
            lines.append(f"Temperature: warmer dry days have {trend} rentals "
                         f"({slope:+.1f} rentals a day per degree C).")
        return "\n".join(lines)


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
    fit = None
    if dry.temperature_mean_c.nunique() >= 2:
        slope, intercept = np.polyfit(dry.temperature_mean_c.astype(float),
                                      dry.rentals_started.astype(float), 1)
        fit = (float(slope), float(intercept))
    return WeatherEffects(daily=days, by_weekday=by_weekday, temperature_fit=fit)


def _dry_and_rainy(weekday: str, group: pd.DataFrame) -> dict[str, object]:
    dry = group[~group.rainy].rentals_started
    rainy = group[group.rainy].rentals_started
    return {"weekday": weekday, "dry_days": len(dry), "rainy_days": len(rainy),
            "dry_mean": dry.mean() if len(dry) else np.nan,
            "rainy_mean": rainy.mean() if len(rainy) else np.nan}
