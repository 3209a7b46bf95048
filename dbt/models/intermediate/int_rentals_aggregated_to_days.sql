select
    rental_date,
    count(*) as rentals_started,
    count_if(status = 'completed') as rentals_completed,
    count_if(status = 'active') as rentals_active,
    avg(duration_minutes) as avg_duration_minutes,
    sum(coalesce(price_cents, 0)) as revenue_cents
from {{ ref('stg_rentals_db__rentals') }}
group by rental_date
