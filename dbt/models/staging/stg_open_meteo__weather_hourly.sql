-- One row per location and hour.
select
    location_id,
    observed_at,
    cast(observed_at as date) as observed_date,
    temperature_2m as temperature_c,
    relative_humidity_2m as relative_humidity_pct,
    precipitation as precipitation_mm,
    wind_speed_10m as wind_speed_kmh,
    weather_code
from {{ ref('silver_weather_hourly') }}
