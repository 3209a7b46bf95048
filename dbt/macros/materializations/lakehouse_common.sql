{#- Shared pieces of the lakehouse materializations.

  Every relation lives in Spark's `global_temp` database: the lakehouse tables are Python
  data source views (CREATE TABLE ... USING cannot pass options to a Python data source,
  see DESIGN.md), and a permanent view may not reference a temporary one. -#}

{#- Mirrors lakehouse.storage.table_uri: <tables_uri>/<name>. -#}
{% macro lakehouse_table_uri(identifier) -%}
  {{ return(var('lakehouse_tables_uri') ~ '/' ~ identifier) }}
{%- endmacro %}

{% macro lakehouse_quote(value) -%}
  {{ return("'" ~ (value | string | replace("\\", "\\\\") | replace("'", "\\'")) ~ "'") }}
{%- endmacro %}

{#- CREATE OR REPLACE GLOBAL TEMPORARY VIEW over the model's Delta table. `columns` (a DDL
    column list) is needed while the table does not exist yet: the data source then takes
    the schema from the view instead of the table. -#}
{% macro lakehouse_delta_view_sql(identifier, columns=none, write_options={}) -%}
  create or replace global temporary view {{ identifier }}
  {%- if columns %} ({{ columns }}){% endif %}
  using lakehouse_delta options (
    table {{ lakehouse_quote(lakehouse_table_uri(identifier)) }},
    profile {{ lakehouse_quote(var('lakehouse_profile')) }}
    {%- for key, value in write_options.items() %},
    {{ key }} {{ lakehouse_quote(value) }}
    {%- endfor %}
  )
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

{% macro lakehouse_column_ddl(columns) -%}
  {%- set parts = [] -%}
  {%- for name, type in columns -%}
    {%- do parts.append('`' ~ name ~ '` ' ~ type) -%}
  {%- endfor -%}
  {{ return(parts | join(', ')) }}
{%- endmacro %}

{#- Stage the model's SELECT as a session view, then overwrite the Delta table with it
    (schema replaced, so changed columns need no manual step). -#}
{% macro lakehouse_overwrite(target, staging) -%}
  {%- set columns = lakehouse_columns(staging) -%}
  {%- set partition_by = config.get('partition_by') -%}
  {%- set write_options = {'overwriteSchema': 'true'} -%}
  {%- if partition_by -%}
    {%- do write_options.update({'partitionBy': (partition_by if partition_by is string else partition_by | join(','))}) -%}
  {%- endif -%}
  {%- call statement('register_' ~ target.identifier) -%}
    {{ lakehouse_delta_view_sql(target.identifier, lakehouse_column_ddl(columns), write_options) }}
  {%- endcall -%}
  {%- call statement('main') -%}
    insert overwrite global_temp.{{ target.identifier }} select * from {{ staging }}
  {%- endcall -%}
  {#- read back through the table's own schema from now on -#}
  {%- call statement('reregister_' ~ target.identifier) -%}
    {{ lakehouse_delta_view_sql(target.identifier) }}
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
