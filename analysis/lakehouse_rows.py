"""The lakehouse tables of the catalog and the rows they hold (from their Delta logs' file
statistics, no Spark): what picks interpreted or generated code for the queries of
`lakehouse transform` and of the notebooks (spark_conf.SMALL_READ_ROWS)."""

from __future__ import annotations

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from lakehouse.catalog import registered_tables
from lakehouse.definitions import LAYERS
from lakehouse.storage import storage_options, table_uri
from lakehouse.table_status import row_count
from settings import Settings


def lakehouse_tables(settings: Settings) -> list[str]:
    """Catalog names of the lakehouse's own tables (`silver.rentals`), not dbt's marts."""
    return sorted(name for name in registered_tables(settings)
                  if name.split(".", 1)[0] in LAYERS)


def rows_held(settings: Settings, tables: list[str], unknown_counts: int) -> int:
    """Rows of the lakehouse tables `tables` (catalog names); a table whose log holds no
    counts, or that cannot be read here, counts as `unknown_counts` rows."""
    rows = 0
    for name in tables:
        uri = table_uri(settings, name.split(".", 1)[1])
        try:
            table = DeltaTable(uri, storage_options=storage_options(settings, uri))
        except TableNotFoundError:
            continue
        except (DeltaError, OSError):  # unreadable here: the query will say why
            rows += unknown_counts
            continue
        counted = row_count(table)
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
        rows += unknown_counts if counted is None else counted
    return rows
