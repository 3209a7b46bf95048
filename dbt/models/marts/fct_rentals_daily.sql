-- Rentals per day with that day's weather. The counts, the durations and the weather are
-- gold's (gold_rentals_daily_weather, per start station and day) summed over the stations:
-- what counts as a rental and which weather location a day uses are defined there once.
-- Still-active rentals and revenue are not in gold; they come from the same live rentals.
with per_station as (
    select * from {{ ref('gold_rentals_daily_weather') }}
),

per_day as (
    select
        rental_date,
        sum(rentals_started) as rentals_started,
        sum(rentals_completed) as rentals_completed,
        -- gold's per-station means weighted back by their completed rentals
        sum(avg_duration_minutes * rentals_completed)
            / nullif(sum(case when avg_duration_minutes is not null
                              then rentals_completed end), 0) as avg_duration_minutes,
        -- the weather of a day is the same on every station's row
        max(location_id) as weather_location_id,
        max(temperature_mean_c) as temperature_mean_c,
        max(temperature_max_c) as temperature_max_c,
        max(precipitation_sum_mm) as precipitation_sum_mm,
        max(wind_speed_max_kmh) as wind_speed_max_kmh,
        max(weather_hours) as weather_hours
    from per_station
    group by rental_date
)

select
    d.rental_date,
    d.rentals_started,
    d.rentals_completed,
    coalesce(r.rentals_active, 0) as rentals_active,
    d.avg_duration_minutes,
    coalesce(r.revenue_cents, 0) as revenue_cents,
    d.weather_location_id,
    d.temperature_mean_c,
    d.temperature_max_c,
    d.precipitation_sum_mm,
    d.wind_speed_max_kmh,
    d.weather_hours,
    d.precipitation_sum_mm > 0 as is_rainy_day
from per_day as d
left join {{ ref('int_rentals_aggregated_to_days') }} as r
    on r.rental_date = d.rental_date
