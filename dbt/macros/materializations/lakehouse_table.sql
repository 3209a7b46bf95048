{#- A Delta table on the lakehouse bucket (<tables_uri>/<model name>), rewritten whole on
    every run with CREATE OR REPLACE TABLE ... AS SELECT on delta-spark: one Delta commit, so
    readers see the old or the new table, never a mix. Any Delta reader can read it. -#}
{% materialization lakehouse_table, adapter='spark' %}
  {%- set target = this.incorporate(type='table') -%}
  {{ run_hooks(pre_hooks) }}
  {%- set staging = lakehouse_stage(target.identifier, sql) -%}
  {{ lakehouse_overwrite(target, staging) }}
  {{ lakehouse_drop_stage(staging) }}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
