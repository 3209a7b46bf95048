{#- Models live in Spark's global_temp database, which always exists and cannot be
    created, dropped or prefixed. -#}

{% macro generate_schema_name(custom_schema_name, node) -%}
  {{ custom_schema_name if custom_schema_name else target.schema }}
{%- endmacro %}

{% macro spark__create_schema(relation) -%}
  {%- if relation.schema != 'global_temp' -%}
    {%- call statement('create_schema') -%}
      create schema if not exists {{ relation.without_identifier() }}
    {%- endcall -%}
  {%- endif -%}
{%- endmacro %}

{#- `is_incremental()` for lakehouse_incremental models (dbt's own one only knows the
    built-in `incremental` materialization and Spark table relations). -#}
{% macro is_incremental() -%}
  {%- if not execute -%}{{ return(false) }}{%- endif -%}
  {%- set relation = adapter.get_relation(database=none, schema=this.schema, identifier=this.identifier) -%}
  {{ return(relation is not none
            and model.config.materialized in ('incremental', 'lakehouse_incremental')
            and not should_full_refresh()) }}
{%- endmacro %}
