{#- A global temporary view: staging and intermediate models (nothing stored). -#}
{% materialization lakehouse_view, adapter='spark' %}
  {%- set target = this.incorporate(type='view') -%}
  {{ run_hooks(pre_hooks) }}
  {%- call statement('main') -%}
    create or replace global temporary view {{ target.identifier }} as
    {{ sql }}
  {%- endcall -%}
  {{ run_hooks(post_hooks) }}
  {%- do adapter.cache_new(target) if adapter.cache_new is defined -%}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
