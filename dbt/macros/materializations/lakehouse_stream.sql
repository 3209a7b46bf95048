{#- A table the streaming ingest writes (bronze, silver, gold, quarantine, quality). dbt
    builds nothing: it checks that the view `lakehouse transform` registered is there, so
    its tests and its place in the lineage are real. -#}
{% materialization lakehouse_stream, adapter='spark' %}
  {%- set target = this.incorporate(type='table') -%}
  {%- call statement('main') -%}
    describe global_temp.{{ target.identifier }}
  {%- endcall -%}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
