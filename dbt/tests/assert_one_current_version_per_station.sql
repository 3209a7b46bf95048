-- Business rule of the station dimension: every station has exactly one current version.
select system_id, station_id, count_if(is_current) as current_versions
from {{ ref('dim_station') }}
group by system_id, station_id
having count_if(is_current) <> 1
