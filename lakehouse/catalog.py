"""The shared table catalog: which lakehouse tables the Hive metastore names, and where.

Every Spark process (ingest, transform, notebooks, the SQL endpoint) uses one Hive
metastore kept in the project's PostgreSQL (`postgres.metastore_database`), so a table
registered once is `bronze.station_status` everywhere. A definition's catalog name is its
layer as the database and its name without the layer prefix as the table.

`registered_tables` reads the metastore's own tables read-only with psycopg, so that
`tables diff` and an `apply` with nothing to do never start Spark. Registering is Spark
SQL (`CREATE TABLE ... USING delta LOCATION`), done by `table_manager.apply_plan`.
"""

from __future__ import annotations

import psycopg

from lakehouse.definitions import TableDefinition
from settings import ConfigError, Settings

# Spark keeps a data source table's real location in the serde property `path` (the
# storage descriptor holds a placeholder Hive can live with).
_REGISTERED = """
SELECT d."NAME", t."TBL_NAME", COALESCE(p."PARAM_VALUE", s."LOCATION")
FROM "TBLS" t
JOIN "DBS" d ON d."DB_ID" = t."DB_ID"
JOIN "SDS" s ON s."SD_ID" = t."SD_ID"
LEFT JOIN "SERDE_PARAMS" p ON p."SERDE_ID" = s."SERDE_ID" AND p."PARAM_KEY" = 'path'
"""


def catalog_name(definition: TableDefinition) -> str:
    """`<layer>.<name without the layer prefix>`, e.g. silver_rentals -> silver.rentals."""
    return f"{definition.layer}.{definition.name[len(definition.layer) + 1:]}"


def catalog_sql(name: str) -> str:
    """A catalog name quoted for Spark SQL: `silver`.`rentals`."""
    return ".".join(f"`{part}`" for part in name.split("."))


def catalog_unreachable(settings: Settings, exc: psycopg.Error) -> ConfigError:
    """The one error for a metastore database that cannot be reached or created."""
    pg = settings.postgres
    return ConfigError(
        f"the table catalog (Hive metastore, database {pg.metastore_database!r} on "
        f"PostgreSQL {pg.host}:{pg.port}) is not usable: {str(exc).strip().splitlines()[0]}"
        f"; is PostgreSQL up (`lakehouse up`), and may user {pg.user!r} create that "
        "database or use it?")


def registered_tables(settings: Settings) -> dict[str, str]:
    """Catalog name -> location of every table in the metastore (empty before the first
    Spark session created the metastore's database and schema)."""
    pg = settings.postgres
    try:
        kwargs = pg.dsn_kwargs()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    kwargs["dbname"] = pg.metastore_database
    try:
        with psycopg.connect(**kwargs, connect_timeout=5, autocommit=True) as conn:
            ready = conn.execute("SELECT to_regclass('\"TBLS\"') IS NOT NULL").fetchone()
            if not ready or not ready[0]:
                return {}
            return {f"{db}.{table}": location
                    for db, table, location in conn.execute(_REGISTERED).fetchall()}
    except psycopg.Error as exc:
        if _no_such_database(exc, pg.metastore_database):
            return {}  # a fresh stack: the first Spark session creates it
        raise catalog_unreachable(settings, exc) from None


def _no_such_database(exc: psycopg.Error, name: str) -> bool:
    """PostgreSQL's invalid_catalog_name (3D000); at connect time psycopg may carry only the
    server's message, so that is checked too."""
    return exc.sqlstate == "3D000" or f'database "{name}" does not exist' in str(exc)
