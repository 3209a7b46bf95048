-- Station dimension with its full history: one row per station version (SCD type 2).
-- Join facts on station_id and is_current, or on station_id and the version's validity.
select
    station_version_key,
    system_id,
    station_id,
    station_name,
    short_name,
    latitude,
    longitude,
    capacity,
    address,
    region_id,
    valid_from,
    valid_to,
    is_current
from {{ ref('stg_gbfs__station_information') }}
