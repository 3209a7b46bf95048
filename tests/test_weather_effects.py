"""The planted-effect judgement of analysis/weather_effects.py on days made here, so what
it calls "rain lowers rentals" is pinned down without a stack: a planted effect is found,
its absence is not, a warm rainy day beating a cold dry one (or mild rainy days beating
cold dry ones on every weekday) does not overturn it, and too few days are not judged."""

from __future__ import annotations

import pandas as pd

from analysis.weather_effects import MIN_DAYS, weather_effects


def _days(count: int, rain_factor: float, per_degree: float,
          warm_rainy_mondays: bool = False) -> pd.DataFrame:
    """`count` past days from a Monday; every third day rainy; temperature 2-11 °C."""
    dates = pd.date_range("2026-09-07", periods=count, freq="D")  # a Monday
    rainy = [i % 3 == 0 for i in range(count)]
    temperature = [2.0 + (i * 7) % 10 for i in range(count)]
    if warm_rainy_mondays:  # the rainy Mondays are the warmest days of all
        temperature = [35.0 if r and i % 7 == 0 else t
                       for i, (t, r) in enumerate(zip(temperature, rainy, strict=True))]
    rentals = [(500 + per_degree * t) * (rain_factor if r else 1.0)
               for t, r in zip(temperature, rainy, strict=True)]
    return pd.DataFrame({"rental_date": dates.date, "rentals_started": rentals,
                         "temperature_mean_c": temperature, "is_rainy_day": rainy})


def test_a_planted_rain_and_temperature_effect_is_found() -> None:
    effects = weather_effects(_days(28, rain_factor=0.6, per_degree=30))
    assert effects.judged and effects.rain_lowers_rentals and effects.warmth_raises_rentals
    assert effects.rain_change is not None and -0.5 < effects.rain_change < -0.3
    assert "rainy days have fewer rentals" in effects.verdict()


def test_no_effect_is_not_found() -> None:
    """Rain changes nothing, and warmer days have fewer rentals."""
    effects = weather_effects(_days(28, rain_factor=1.0, per_degree=-5))
    assert effects.judged
    assert effects.rain_lowers_rentals is False
    assert effects.warmth_raises_rentals is False
    assert "do NOT have fewer" in effects.verdict()


def test_one_warm_rainy_day_does_not_overturn_the_rain_effect() -> None:
    effects = weather_effects(_days(28, rain_factor=0.6, per_degree=30,
                                    warm_rainy_mondays=True))
    monday = effects.by_weekday.set_index("weekday").loc["Monday"]
    assert monday.rainy_mean > monday.dry_mean  # the exception is there
    assert effects.weekdays_lower_when_rainy < len(effects.comparable)
    assert effects.rain_lowers_rentals


def test_too_few_days_are_not_judged() -> None:
    effects = weather_effects(_days(MIN_DAYS - 1, rain_factor=0.6, per_degree=30))
    assert not effects.judged and effects.rain_lowers_rentals is None
    assert "too few to judge" in effects.verdict()


def test_mild_rainy_days_beating_cold_dry_ones_do_not_hide_the_rain_effect() -> None:
    """Three weeks of November (the shared ingest's backfill of 2026-12-01): the rainy days
    were mild and some dry days cold, so rainy days averaged more rentals than the dry days
    of their weekday; the rain's effect is judged at the same temperature."""
    days = _days(21, rain_factor=0.6, per_degree=80)
    days["temperature_mean_c"] = [11.0 + i % 4 if rainy else 1.0 + i % 4
                                  for i, rainy in enumerate(days.is_rainy_day)]
    days["rentals_started"] = [(500 + 80 * t) * (0.6 if rainy else 1.0) for t, rainy in
                               zip(days.temperature_mean_c, days.is_rainy_day, strict=True)]
    effects = weather_effects(days)
    assert effects.weekdays_lower_when_rainy == 0  # the raw means say the opposite
    assert effects.rain_lowers_rentals and effects.warmth_raises_rentals
    assert effects.rain_change is not None and effects.rain_change < -0.3, effects.verdict()
