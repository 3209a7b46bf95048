-- One row per station status update.
select
    system_id,
    station_id,
    last_updated as reported_at,
    num_bikes_available as bikes_available,
    num_docks_available as docks_available,
    num_bikes_disabled as bikes_disabled,
    num_docks_disabled as docks_disabled,
    is_installed,
    is_renting,
    is_returning,
    num_bikes_available = 0 as is_empty,
    num_docks_available = 0 as is_full,
    ingested_at
from {{ ref('silver_station_status') }}
