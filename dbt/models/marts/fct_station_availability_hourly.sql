-- Station availability per hour, rolled up from gold's 15-minute windows
-- (gold_station_availability_15min): how empty or full a station was is defined there
-- once, weighting each status by how long it held; an hour here is the mean of its
-- windows. The latest hour is still filling up (is_complete_hour = false).
with windows as (
    select * from {{ ref('gold_station_availability_15min') }}
),

latest as (
    select date_trunc('hour', max(window_start)) as latest_hour from windows
),

hourly as (
    select
        system_id,
        station_id,
        date_trunc('hour', window_start) as hour_start,
        count(*) as windows,
        sum(status_updates) as status_updates,
        avg(avg_bikes_available) as avg_bikes_available,
        avg(avg_docks_available) as avg_docks_available,
        avg(share_time_empty) as share_time_empty,
        avg(share_time_full) as share_time_full
    from windows
    group by system_id, station_id, date_trunc('hour', window_start)
)

select
    h.system_id,
    h.station_id,
    h.hour_start,
    hour(h.hour_start) as hour_of_day,
    dayofweek(h.hour_start) as day_of_week,
    h.windows,
    h.status_updates,
    h.avg_bikes_available,
    h.avg_docks_available,
    h.share_time_empty,
    h.share_time_full,
    d.capacity,
    case when d.capacity > 0 then h.avg_bikes_available / d.capacity end as avg_fill_ratio,
    h.hour_start < l.latest_hour as is_complete_hour
from hourly as h
cross join latest as l
left join {{ ref('dim_station') }} as d
    on d.system_id = h.system_id
    and d.station_id = h.station_id
    -- the station version valid at the start of the hour
    and h.hour_start >= d.valid_from
    and (d.valid_to is null or h.hour_start < d.valid_to)
