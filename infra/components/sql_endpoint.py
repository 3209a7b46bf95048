"""The SQL endpoint: Spark's Thrift server over the shared catalog, for beeline, JDBC and BI
tools, PyHive and dbt-spark's thrift method. Optional (`embedded.sql_endpoint`, or
`lakehouse up --sql-endpoint`).

What to run comes from `spark_streaming.sql_endpoint` (the same Spark confs as every Spark
process of the project); this component starts, checks and stops it like the other servers.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from clients import sql_endpoint_connect
from infra.components import jvm
from infra.components.base import Component, Port
from settings import Settings
from settings.layout import StateLayout
from spark_streaming import sql_endpoint as launch
from spark_streaming.spark_conf import metastore_has_schema, metastore_schema_lock


class SqlEndpoint(Component):
    name = "sql-endpoint"
    marker = "HiveThriftServer2"
    # A Spark driver: 35-50 s on a busy 2-core machine (measured), longer when it creates the
    # metastore's schema on a fresh stack.
    start_timeout = 240.0
    stop_timeout = 30.0

    def __init__(self, settings: Settings, layout: StateLayout):
        super().__init__(settings, layout)
        self._starting = contextlib.ExitStack()  # held from prepare() until it answers

    def wanted(self) -> bool:
        return self.settings.embedded.sql_endpoint

    def address(self) -> str:
        return launch.jdbc_url(self.settings).rsplit("/", 1)[0]

    def ports(self) -> list[Port]:
        return [Port("thrift", self.settings.embedded.sql_endpoint_port,
                     "LAKEHOUSE_EMBEDDED__SQL_ENDPOINT_PORT")]

    def binaries(self) -> list[Path]:
        return [jvm.java(), launch.spark_submit(), launch.thrift_server_jar()]

    @property
    def properties_file(self) -> Path:
        return self.layout.run / f"{self.name}.properties"

    @property
    def log_config(self) -> Path:
        return self.layout.run / f"{self.name}-log4j2.properties"

    def prepare(self) -> None:
        """The confs file; on a fresh catalog, the metastore-schema lock first: the server
        creates the schema while it starts, and no other Spark process may at that time."""
        self._starting.close()
        if not metastore_has_schema(self.settings):
            self._starting.enter_context(metastore_schema_lock(self.settings))
            if metastore_has_schema(self.settings):  # made by another process meanwhile
                self._starting.close()
            else:
                self.notes.append("created the table catalog's schema (metastore database "
                                  f"{self.settings.postgres.metastore_database!r})")
        self._starting.callback(self.properties_file.unlink, missing_ok=True)
        self.log_config.parent.mkdir(parents=True, exist_ok=True)
        self.log_config.write_text(launch.log4j2_properties(self.settings))
        confs = launch.with_log_config(launch.thrift_server_confs(self.settings),
                                       self.log_config)
        launch.write_properties(self.properties_file, confs)

    def launch(self) -> None:
        try:
            super().launch()
        except BaseException:
            self._starting.close()
            raise

    def wait_healthy(self) -> None:
        """As every component; then the lock is released and the confs file (it holds the
        secrets, and the JVM read it when it started) removed, whatever the outcome."""
        try:
            super().wait_healthy()
        finally:
            self._starting.close()

    def command(self) -> list[str]:
        return launch.thrift_server_command(self.settings, self.properties_file)

    def environment(self) -> dict[str, str]:
        return launch.thrift_server_environment(self.settings)

    def healthy(self) -> bool:
        """A client session that runs a query. The first session of a new server loads the
        Delta catalog: up to 18 s on a busy 2-core machine (measured), hence the timeout."""
        with contextlib.closing(sql_endpoint_connect(self.settings, timeout=30,
                                                      quiet=True)) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT 1")
            return cursor.fetchall() == [(1,)]

    def version(self) -> str:
        """Spark's version, from the Thrift server's jar."""
        return jvm.jar_version(launch.thrift_server_jar(), launch.THRIFT_SERVER_ARTIFACT)
