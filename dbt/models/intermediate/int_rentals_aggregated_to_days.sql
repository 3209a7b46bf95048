-- What gold_rentals_daily_weather does not hold, per UTC start date: rentals still out and
-- revenue, of the live rentals and the historical trips (every trip is completed) alike,
-- as gold counts both (counts of started and completed rentals are gold's).
with rides as (
    select rental_date, status, price_cents from {{ ref('stg_rentals_db__rentals') }}
    union all
    select trip_date as rental_date, 'completed' as status, price_cents
    from {{ ref('silver_trips') }}
)

select
    rental_date,
    count_if(status = 'active') as rentals_active,
    sum(coalesce(price_cents, 0)) as revenue_cents
from rides
group by rental_date
