-- What gold_rentals_daily_weather does not hold, per UTC start date of the live rentals:
-- rentals still out and revenue (counts of started and completed rentals are gold's).
select
    rental_date,
    count_if(status = 'active') as rentals_active,
    sum(coalesce(price_cents, 0)) as revenue_cents
from {{ ref('stg_rentals_db__rentals') }}
group by rental_date
