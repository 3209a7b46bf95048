-- Rentals per day with that day's weather (weather columns are null for days without it).
select
    r.rental_date,
    r.rentals_started,
    r.rentals_completed,
    r.rentals_active,
    r.avg_duration_minutes,
    r.revenue_cents,
    w.temperature_mean_c,
    w.temperature_max_c,
    w.precipitation_sum_mm,
    w.wind_speed_max_kmh,
    coalesce(w.weather_hours, 0) as weather_hours,
    w.precipitation_sum_mm > 0 as is_rainy_day
from {{ ref('int_rentals_aggregated_to_days') }} as r
left join {{ ref('int_weather_aggregated_to_days') }} as w
    on w.weather_date = r.rental_date
