"""Every Delta table under the lakehouse root as a view in Spark's `global_temp` database:
how dbt models, dbt tests and notebooks reach the tables by name."""

from __future__ import annotations

import re

from pyarrow import fs as pafs
from pyspark.sql import SparkSession

from lakehouse.storage import arrow_filesystem, delta_path_sql, table_uri
from settings import Settings

_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def lakehouse_table_names(settings: Settings) -> list[str]:
    """Names of the folders under the tables root that hold a Delta table."""
    filesystem, root = arrow_filesystem(settings, settings.tables_uri)
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except FileNotFoundError:
        return []
    folders = [e for e in entries if e.type == pafs.FileType.Directory]
    logs = filesystem.get_file_info([f"{f.path}/_delta_log" for f in folders])
    return sorted(folder.base_name for folder, log in zip(folders, logs, strict=True)
                  if log.type == pafs.FileType.Directory and _VIEW_NAME.match(folder.base_name))


def register_lakehouse_views(spark: SparkSession, settings: Settings,
                             names: list[str] | None = None) -> list[str]:
    """CREATE OR REPLACE GLOBAL TEMPORARY VIEW <name> for each table (`names`, default: every
    table under the root); returns the names."""
    names = lakehouse_table_names(settings) if names is None else names
    for name in names:
        if not _VIEW_NAME.match(name):
            raise ValueError(f"view name {name!r}: use letters, digits and underscores")
        spark.sql(f"CREATE OR REPLACE GLOBAL TEMPORARY VIEW {name} AS "
                  f"SELECT * FROM {delta_path_sql(table_uri(settings, name))}")
    return names
