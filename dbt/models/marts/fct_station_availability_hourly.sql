-- Station availability per hour: how often a station was empty or full, and how many
-- bikes it had. The latest hour is still filling up (is_complete_hour = false).
with latest as (
    select max(reported_hour) as latest_hour from {{ ref('fct_station_status_observations') }}
)

select
    o.system_id,
    o.station_id,
    o.reported_hour as hour_start,
    hour(o.reported_hour) as hour_of_day,
    dayofweek(o.reported_hour) as day_of_week,
    count(*) as status_updates,
    avg(o.bikes_available) as avg_bikes_available,
    min(o.bikes_available) as min_bikes_available,
    avg(o.docks_available) as avg_docks_available,
    avg(o.fill_ratio) as avg_fill_ratio,
    avg(case when o.is_empty then 1.0 else 0.0 end) as share_updates_empty,
    avg(case when o.is_full then 1.0 else 0.0 end) as share_updates_full,
    o.reported_hour < max(l.latest_hour) as is_complete_hour
from {{ ref('fct_station_status_observations') }} as o
cross join latest as l
group by o.system_id, o.station_id, o.reported_hour
