"""SQL access: a temporary view over a Delta table, so Spark SQL (dbt, notebooks) can
SELECT, INSERT INTO and INSERT OVERWRITE it.

`CREATE TABLE ... USING` does not pass OPTIONS to a Python data source (DESIGN.md), hence a
view. Only the table URI (and a profile name) go into the SQL text, never credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from spark_streaming.delta_source.options import normalize_table_uri

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register_table_view(spark: SparkSession, name: str, table_uri: str,
                        global_view: bool = False, profile: str | None = None,
                        filters: Sequence[tuple[str, str, Any]] = ()) -> str:
    """CREATE OR REPLACE [GLOBAL] TEMPORARY VIEW `name` over the Delta table, restricted to
    the rows matching `filters` (the source's `filters` option: the only way a read skips
    files, see reader.py); returns the name to query (`global_temp.name` for a global
    view). The table must exist."""
    if not _NAME.match(name):
        raise ValueError(f"view name {name!r}: use letters, digits and underscores")
    options = [f"table {_literal(normalize_table_uri(table_uri))}"]
    if profile:
        options.append(f"profile {_literal(profile)}")
    if filters:
        triples = [[column, operator, value] for column, operator, value in filters]
        options.append(f"filters {_literal(json.dumps(triples, default=str))}")
    scope = "GLOBAL TEMPORARY" if global_view else "TEMPORARY"
    spark.sql(f"CREATE OR REPLACE {scope} VIEW {name} USING lakehouse_delta "
              f"OPTIONS ({', '.join(options)})")
    return f"global_temp.{name}" if global_view else name
