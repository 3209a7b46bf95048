-- Live rentals (rows deleted in the operational database are left out).
select
    rental_id,
    bike_id,
    start_station_id,
    end_station_id,
    started_at,
    ended_at,
    cast(started_at as date) as rental_date,
    status,
    price_cents,
    case
        when ended_at is not null
        then (unix_timestamp(ended_at) - unix_timestamp(started_at)) / 60.0
    end as duration_minutes
from {{ ref('silver_rentals') }}
where not is_deleted
