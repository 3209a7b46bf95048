{#- Shared pieces of the lakehouse materializations.

  Every relation lives in Spark's `global_temp` database: `lakehouse transform` registers
  each lakehouse Delta table as a global temporary view over delta.`<location>`, and a
  permanent view may not reference a temporary one. delta-spark does the reads and writes. -#}

{#- delta.`<tables_uri>/<name>`: the model's Delta table by path (mirrors
    lakehouse.storage.table_uri). -#}
{% macro lakehouse_delta_path(identifier) -%}
  {{ return('delta.`' ~ var('lakehouse_tables_uri') ~ '/' ~ identifier ~ '`') }}
{%- endmacro %}

{#- CREATE OR REPLACE GLOBAL TEMPORARY VIEW over the model's Delta table (its current
    schema: re-run after the table's columns change). -#}
{% macro lakehouse_view_over_table_sql(identifier) -%}
  create or replace global temporary view {{ identifier }} as
  select * from {{ lakehouse_delta_path(identifier) }}
{%- endmacro %}

{#- (name, type) of every column of a relation, in order, from DESCRIBE. -#}
{% macro lakehouse_columns(relation_sql) -%}
  {%- set described = run_query('describe ' ~ relation_sql) -%}
  {%- set columns = [] -%}
  {%- for row in described.rows -%}
    {%- if row[0] and not row[0].startswith('#') -%}
      {%- do columns.append((row[0], row[1])) -%}
    {%- elif (row[0] or '').startswith('#') -%}
      {%- break -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(columns) }}
{%- endmacro %}

{#- Replace the Delta table with the staged SELECT in one commit (CREATE OR REPLACE TABLE
    ... AS SELECT: schema replaced, so changed columns need no manual step; readers see the
    old or the new table, never a mix), then point the view at the new schema. -#}
{% macro lakehouse_overwrite(target, staging) -%}
  {%- set partition_by = config.get('partition_by') -%}
  {%- if partition_by is string -%}{%- set partition_by = [partition_by] -%}{%- endif -%}
  {%- call statement('main') -%}
    create or replace table {{ lakehouse_delta_path(target.identifier) }} using delta
    {%- if partition_by %} partitioned by ({{ partition_by | join(', ') }}){% endif %}
    as select * from {{ staging }}
  {%- endcall -%}
  {%- call statement('register_' ~ target.identifier) -%}
    {{ lakehouse_view_over_table_sql(target.identifier) }}
  {%- endcall -%}
{%- endmacro %}

{% macro lakehouse_stage(identifier, sql) -%}
  {%- set staging = identifier ~ '__dbt_staging' -%}
  {%- call statement('stage_' ~ identifier) -%}
    create or replace temporary view {{ staging }} as
    {{ sql }}
  {%- endcall -%}
  {{ return(staging) }}
{%- endmacro %}

{% macro lakehouse_drop_stage(staging) -%}
  {%- call statement('drop_' ~ staging) -%}
    drop view if exists {{ staging }}
  {%- endcall -%}
{%- endmacro %}
