{#- A model's `schema` config is its catalog database as written (`marts`, `staging`),
    not dbt's default `<target schema>_<schema>`: the lakehouse's databases are named by
    layer, the same for every target. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
  {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}
