-- One row per station version (SCD type 2), renamed to the analysis vocabulary.
select
    md5(concat_ws('|', system_id, station_id, cast(valid_from as string))) as station_version_key,
    system_id,
    station_id,
    name as station_name,
    short_name,
    lat as latitude,
    lon as longitude,
    capacity,
    address,
    region_id,
    valid_from,
    valid_to,
    is_current,
    gbfs_version
from {{ ref('silver_station_information') }}
