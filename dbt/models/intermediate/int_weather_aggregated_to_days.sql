-- Daily weather of the system's area: per location first, then averaged over locations.
with per_location as (
    select
        observed_date,
        location_id,
        avg(temperature_c) as temperature_mean_c,
        max(temperature_c) as temperature_max_c,
        sum(precipitation_mm) as precipitation_sum_mm,
        max(wind_speed_kmh) as wind_speed_max_kmh,
        count(*) as weather_hours
    from {{ ref('stg_open_meteo__weather_hourly') }}
    group by observed_date, location_id
)

select
    observed_date as weather_date,
    avg(temperature_mean_c) as temperature_mean_c,
    max(temperature_max_c) as temperature_max_c,
    avg(precipitation_sum_mm) as precipitation_sum_mm,
    max(wind_speed_max_kmh) as wind_speed_max_kmh,
    sum(weather_hours) as weather_hours,
    count(*) as weather_locations
from per_location
group by observed_date
