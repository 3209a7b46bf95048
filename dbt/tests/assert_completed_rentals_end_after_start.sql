-- Business rule of the rentals: a completed rental has an end, and it is not before its start.
select rental_id, started_at, ended_at
from {{ ref('stg_rentals_db__rentals') }}
where status = 'completed'
  and (ended_at is null or ended_at < started_at)
