{#- An incremental Delta table: the first run (or --full-refresh) overwrites, later runs
    INSERT INTO (append, one Delta commit) the rows the model selects when
    `is_incremental()` is true. Strategy `append` only: rows already in the table are
    never updated, so the model must select only new rows (see dbt/README.md). A changed
    column list (names, order or types) fails the run with the fix to apply. -#}
{% materialization lakehouse_incremental, adapter='spark' %}
  {%- set target = this.incorporate(type='table') -%}
  {%- set existing = adapter.get_relation(database=none, schema=this.schema, identifier=this.identifier) -%}
  {%- set strategy = config.get('incremental_strategy') or 'append' -%}
  {%- if strategy != 'append' -%}
    {{ exceptions.raise_compiler_error("model " ~ this.identifier ~ ": incremental_strategy '" ~ strategy ~ "' is not supported by lakehouse_incremental (use 'append', or lakehouse_table)") }}
  {%- endif -%}
  {{ run_hooks(pre_hooks) }}
  {%- set staging = lakehouse_stage(target.identifier, sql) -%}
  {%- if existing is none or should_full_refresh() -%}
    {{ lakehouse_overwrite(target, staging) }}
  {%- else -%}
    {%- set new_columns = lakehouse_columns(staging) -%}
    {%- set old_columns = lakehouse_columns('global_temp.' ~ target.identifier) -%}
    {%- if new_columns != old_columns -%}
      {{ exceptions.raise_compiler_error("model " ~ this.identifier ~ ": its columns " ~ new_columns ~ " differ from the table's " ~ old_columns ~ "; rebuild it with `lakehouse transform --full-refresh --select " ~ this.identifier ~ "`") }}
    {%- endif -%}
    {%- call statement('main') -%}
      insert into {{ lakehouse_delta_path(target.identifier) }} select * from {{ staging }}
    {%- endcall -%}
  {%- endif -%}
  {{ lakehouse_drop_stage(staging) }}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{% endmaterialization %}
