{#- Fails with the key values that occur more than once (dbt_utils' test of the same
    name cannot be installed here: dbt packages come from GitHub/hub, not PyPI). -#}
{% test lakehouse_unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as occurrences
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
