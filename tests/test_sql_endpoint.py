"""The SQL endpoint (`lakehouse up --sql-endpoint`, Spark's Thrift server over the shared
catalog): beeline and PyHive count `silver.rentals` of the shared ingest as delta-rs does,
it listens on 127.0.0.1 only, `status` shows it, `lakehouse down` stops it and frees the
port, and it starts on a catalog whose schema does not exist yet."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg import sql
from pyhive import hive

from clients import postgres_connect, sql_endpoint_connect
from infra.components.sql_endpoint import SqlEndpoint
from infra.ports import port_is_free, wait_until
from infra.stack import Stack
from settings import Settings
from spark_streaming import sql_endpoint as launch
from spark_streaming.spark_conf import spark_confs, spark_jars
from tests.conftest import (
    PROJECT_DIR,
    IngestedLakehouse,
    TransformedLakehouse,
    read_catalog_table,
    read_delta,
    run_cli,
)

LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1")
COUNT_SQL = "SELECT count(*) FROM silver.rentals"
MARTS = ("dim_station", "fct_rentals_daily", "fct_station_status_observations",
         "fct_station_availability_hourly")


# -- what is launched (no server needed) -----------------------------------------------
def test_the_server_gets_the_confs_of_every_spark_session(settings: Settings,
                                                           tmp_path: Path) -> None:
    confs = launch.thrift_server_confs(settings)
    for key, value in spark_confs(settings, launch.APP_NAME).items():
        if key != "spark.driver.extraClassPath":
            assert confs[key] == value, key
    class_path = confs["spark.driver.extraClassPath"].split(os.pathsep)
    assert {str(jar) for jar in spark_jars(settings)} <= set(class_path)
    assert any(Path(p).name.startswith("postgresql-") for p in class_path)
    # Hive's function registry, built when a session of a two-thread dbt build closes,
    # loads this class; pyspark 4.1 does not ship its jar
    signable = "org/apache/hadoop/hive/llap/security/LlapSigner$Signable.class"
    assert [p for p in class_path if p.endswith(".jar") and Path(p).is_file()
            and signable in zipfile.ZipFile(p).namelist()], f"no jar holds {signable}"

    command = launch.thrift_server_command(settings, tmp_path / "endpoint.properties")
    assert command[0].endswith("bin/spark-submit")
    assert launch.THRIFT_SERVER_CLASS in command
    assert "hive.server2.thrift.bind.host=127.0.0.1" in command
    assert f"hive.server2.thrift.port={settings.embedded.sql_endpoint_port}" in command
    assert not any(settings.s3.credentials()[1] in part for part in command), \
        "a secret on the command line"

    properties = tmp_path / "endpoint.properties"
    launch.write_properties(properties, {"a.key": "C:\\x=y #z", "b": " lead"})
    assert stat.S_IMODE(properties.stat().st_mode) == 0o600
    assert properties.read_text().splitlines()[1:] == ["a.key=C:\\\\x=y #z", "b=\\ lead"]


# -- the running endpoint over the shared ingest ---------------------------------------
@pytest.fixture(scope="module")
def endpoint(ingested_lakehouse: IngestedLakehouse) -> Iterator[SqlEndpoint]:
    """`lakehouse up --sql-endpoint` on the running test stack, over the shared ingest's
    catalog (its metastore database). Stopped at the end even if a test failed before `down`."""
    settings = ingested_lakehouse.settings
    # on the shared ingest's own catalog database
    result = run_cli("up", "--sql-endpoint", env=ingested_lakehouse.env, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"sql-endpoint: healthy in [0-9.]+ s", result.stderr), result.stderr
    component = Stack(settings).component("sql-endpoint")
    assert isinstance(component, SqlEndpoint)
    yield component
    component.stop()


def _beeline(env: dict[str, str], query: str) -> subprocess.CompletedProcess[str]:
    """`lakehouse sql -e` (beeline with the project's Java, jars and endpoint URL)."""
    return run_cli("sql", "-e", query, "--", "--silent=true", "--showHeader=false",
                   "--outputformat=tsv2", env=env, timeout=180)


def test_beeline_counts_silver_rentals_as_delta_rs_does(
        endpoint: SqlEndpoint, ingested_lakehouse: IngestedLakehouse) -> None:
    expected = read_delta(ingested_lakehouse.settings, "silver_rentals", ["rental_id"]).num_rows
    assert expected > 0
    result = _beeline(ingested_lakehouse.env, COUNT_SQL)
    assert result.returncode == 0, result.stdout + result.stderr
    # even silent, beeline prints its prompt (no newline) before the rows: "0: jdbc:...> 27"
    last = result.stdout.strip().splitlines()[-1]
    assert re.sub(r"^\d+: jdbc:hive2://\S*> ", "", last).strip() == str(expected), result.stdout


def test_pyhive_counts_silver_rentals_as_delta_rs_does(
        endpoint: SqlEndpoint, ingested_lakehouse: IngestedLakehouse) -> None:
    expected = read_delta(ingested_lakehouse.settings, "silver_rentals", ["rental_id"]).num_rows
    port = ingested_lakehouse.settings.embedded.sql_endpoint_port
    # what a user types: PyHive's own connect, authentication NONE (SASL PLAIN, any user)
    with contextlib.closing(hive.connect(host="127.0.0.1", port=port,
                                         username="lakehouse")) as conn:
        cursor = conn.cursor()
        cursor.execute(COUNT_SQL)
        assert cursor.fetchall() == [(expected,)]
        cursor.execute("SHOW TABLES IN silver")
        assert "rentals" in {row[1] for row in cursor.fetchall()}
    # the project's client (the health check's), with its socket timeout
    with contextlib.closing(sql_endpoint_connect(ingested_lakehouse.settings)) as conn:
        cursor = conn.cursor()
        cursor.execute(COUNT_SQL)
        assert cursor.fetchall() == [(expected,)]


def test_plain_dbt_build_through_the_endpoint(
        endpoint: SqlEndpoint, transformed_lakehouse: TransformedLakehouse,
        tmp_path: Path) -> None:
    """What a dbt user runs after an ingest: `dbt build` in dbt/ with the committed profile
    (target `thrift`, the endpoint's port from the same variable that moves the server).
    Every model, the snapshot and every test of theirs pass, and the marts keep the rows
    `lakehouse transform` built from the same inputs. The key tests of the lakehouse's own
    tables (tag `lakehouse`: 19 of the 52 tests, 40% of this build's time) are left out:
    the ingest's guarantees, which the session builds of the same project run (the shared
    transform, the transform DAG); that the endpoint reads those tables the models above
    them prove."""
    settings = transformed_lakehouse.ingested.settings
    before = {name: read_catalog_table(settings, f"marts.{name}").num_rows for name in MARTS}
    env = {**os.environ, **transformed_lakehouse.ingested.env,
           "LAKEHOUSE_EMBEDDED__SQL_ENDPOINT_PORT": str(settings.embedded.sql_endpoint_port)}
    env.pop("LAKEHOUSE_DBT_TARGET", None)
    dbt = Path(sys.executable).with_name("dbt")
    result = subprocess.run(
        [str(dbt), "build", "--exclude", "tag:lakehouse", "--target-path",
         str(tmp_path / "target"),
         "--log-path", str(tmp_path / "logs")],
        cwd=PROJECT_DIR / "dbt", env=env, capture_output=True, text=True, timeout=1500,
        check=False)
    assert result.returncode == 0, result.stdout[-6000:]
    results = json.loads((tmp_path / "target" / "run_results.json").read_text())["results"]
    # exposures (the notebooks) are documentation: dbt reports them as no-op
    done = {"model": "success", "snapshot": "success", "test": "pass", "exposure": "no-op"}
    assert not [(r["unique_id"], r["status"]) for r in results
                if done.get(r["unique_id"].split(".")[0]) != r["status"]]
    assert {r["unique_id"].split(".")[0] for r in results} >= {"model", "snapshot", "test"}
    # every test but those on the lakehouse's own tables ran
    nodes = json.loads((tmp_path / "target" / "manifest.json").read_text())["nodes"]
    expected = {uid for uid, node in nodes.items() if node["resource_type"] == "test"
                and not any("lakehouse" in nodes[parent]["tags"]
                            for parent in node["depends_on"]["nodes"] if parent in nodes)}
    assert {r["unique_id"] for r in results if r["unique_id"].startswith("test.")} \
        == expected and len(expected) >= 30
    assert {name: read_catalog_table(settings, f"marts.{name}").num_rows
            for name in MARTS} == before


def test_endpoint_listens_on_loopback_only(endpoint: SqlEndpoint) -> None:
    pid = endpoint.process.pid()
    assert pid is not None
    pids = {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids]
    port = endpoint.settings.embedded.sql_endpoint_port
    assert port in {c.laddr.port for c in listening}, listening
    exposed = [c.laddr for c in listening if c.laddr.ip not in LOOPBACK]
    assert not exposed, f"bound beyond loopback: {exposed}"
    others = [a.address for addresses in psutil.net_if_addrs().values() for a in addresses
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    for address in others:  # the machine's other addresses refuse the port
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=3):
            pass


def test_status_shows_the_endpoint_and_up_leaves_it_alone(endpoint: SqlEndpoint) -> None:
    result = run_cli("status", "--servers-only", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    row = rows["sql-endpoint"]
    assert row["state"] == "healthy", row
    port = endpoint.settings.embedded.sql_endpoint_port
    assert row["address"] == f"jdbc:hive2://127.0.0.1:{port}"
    assert row["version"] == importlib.metadata.version("pyspark")
    assert row["pid"] == endpoint.process.pid()
    before = endpoint.process.pid()
    again = run_cli("up", "--sql-endpoint")
    assert again.returncode == 0, again.stderr
    assert "sql-endpoint: already healthy, left alone" in again.stderr
    assert endpoint.process.pid() == before


def test_down_stops_the_endpoint_and_frees_its_port(endpoint: SqlEndpoint) -> None:
    pid = endpoint.process.pid()
    assert pid is not None
    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    others = {c.name: c.process.pid() for c in Stack(endpoint.settings).components
              if c.name != "sql-endpoint" and c.process.pid() is not None}
    result = run_cli("down", "--sql-endpoint")  # the endpoint alone
    assert result.returncode == 0, result.stderr
    assert "sql-endpoint: stopped" in result.stderr
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    port = endpoint.settings.embedded.sql_endpoint_port
    assert wait_until(lambda: port_is_free(port), timeout=30), f"port {port} still taken"
    assert not endpoint.properties_file.exists()
    assert {c.name: c.process.pid() for c in Stack(endpoint.settings).components
            if c.name in others} == others, "down --sql-endpoint stopped another server"
    status = run_cli("status", "--servers-only", "--json")
    assert "sql-endpoint" not in {row["name"] for row in json.loads(status.stdout)}
    # with no endpoint, `lakehouse sql` says how to start one
    result = run_cli("sql", "-e", COUNT_SQL)
    assert result.returncode == 1
    assert "lakehouse up --sql-endpoint" in result.stderr


# -- a catalog whose schema does not exist yet -------------------------------------------
def test_endpoint_creates_a_missing_catalog_schema(settings: Settings, stack: Stack) -> None:
    """As the first Spark process on a new PostgreSQL: the server creates the metastore's
    database and schema while it starts (under the advisory lock sessions take)."""
    database = f"metastore_{uuid.uuid4().hex[:8]}"
    fresh = settings.model_copy(update={"postgres": settings.postgres.model_copy(
        update={"metastore_database": database})})
    component = Stack(fresh).component("sql-endpoint")
    try:
        began = time.monotonic()
        result = run_cli("up", "--sql-endpoint",
                         env={"LAKEHOUSE_POSTGRES__METASTORE_DATABASE": database}, timeout=400)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "created the table catalog's schema" in result.stderr, result.stderr
        assert time.monotonic() - began < 400
        with contextlib.closing(sql_endpoint_connect(fresh, timeout=60)) as conn:
            cursor = conn.cursor()
            cursor.execute("SHOW DATABASES")
            assert cursor.fetchall() == [("default",)]
        with postgres_connect(fresh, dbname=database) as conn:
            names = [row[0] for row in conn.execute('SELECT "NAME" FROM "DBS"').fetchall()]
        assert names == ["default"]
    finally:
        component.stop()
        with postgres_connect(settings, dbname="postgres") as conn, \
                contextlib.suppress(psycopg.Error):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(database)))
    assert port_is_free(settings.embedded.sql_endpoint_port)
