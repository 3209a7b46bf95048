"""Least privilege in PostgreSQL, on the real embedded server: Debezium logs in as a
replication role that can read the captured tables and nothing more, the rentals
application as a role that owns its tables but is neither superuser nor replication, and
the step that makes them changes nothing when run again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from clients import postgres_connect
from connectors.connect_config import CONNECTORS_DIR, load_connector_file
from connectors.rentals.database import apply_schema, connect
from infra.stack import Stack
from settings import Settings, project_environment
from tests.conftest import invoke_cli
from tests.connect_support import unique

pytestmark = pytest.mark.stack

CAPTURED = ("stations", "bikes", "rentals")
_ATTRIBUTES = "rolsuper, rolreplication, rolcanlogin, rolcreatedb, rolcreaterole, rolbypassrls"


def _cdc_login(settings: Settings) -> tuple[str, str]:
    """The user and password the committed Debezium connector logs in with, its
    `${env:VAR}` reference resolved as the worker resolves it."""
    config = load_connector_file(CONNECTORS_DIR / "rentals-cdc.json", settings).config
    reference = config["database.password"]
    assert reference.startswith("${env:") and reference.endswith("}"), reference
    variable = reference[len("${env:"):-1]
    return config["database.user"], project_environment(settings, os.environ)[variable]


@pytest.fixture(scope="module")
def seeded(stack: Stack, settings: Settings) -> Settings:
    result = invoke_cli("rentals", "seed")
    assert result.returncode == 0, result.stdout + result.stderr
    return settings


@pytest.fixture
def cdc_conn(seeded: Settings) -> Iterator[psycopg.Connection]:
    user, password = _cdc_login(seeded)
    pg = seeded.postgres
    with psycopg.connect(host=pg.host, port=pg.port, dbname=pg.database, user=user,
                         password=password, autocommit=True, connect_timeout=5) as conn:
        yield conn


def _attributes(settings: Settings, role: str) -> dict[str, Any]:
    with postgres_connect(settings) as admin, admin.cursor(
            row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute(f"SELECT {_ATTRIBUTES} FROM pg_roles WHERE rolname = %s",
                          (role,)).fetchone()
    assert row is not None, f"no role {role!r}"
    return row


def _snapshot(settings: Settings) -> list[tuple[Any, ...]]:
    """Everything the roles step sets: both roles (passwords included), the database's and
    schema's owners and access lists, the tables', the publication's tables."""
    pg = settings.postgres
    with postgres_connect(settings) as admin:
        return admin.execute(
            f"SELECT rolname, {_ATTRIBUTES}, rolpassword FROM pg_authid "
            "WHERE rolname IN (%s, %s) "
            "UNION ALL SELECT datname, null, null, null, null, null, null, "
            "datdba::regrole::text || datacl::text FROM pg_database WHERE datname = %s "
            "UNION ALL SELECT relname, null, null, null, null, null, null, "
            "relowner::regrole::text || coalesce(relacl::text, '') FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace "
            "UNION ALL SELECT pubname, null, null, null, null, null, null, tablename "
            "FROM pg_publication_tables ORDER BY 1, 8",
            (pg.app_user, pg.cdc_user, pg.database)).fetchall()


def _denied(conn: psycopg.Connection, statement: str) -> None:
    with pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement)


# -- Debezium's role ---------------------------------------------------------------------


def test_debezium_logs_in_as_a_replication_role_that_is_not_superuser(
    seeded: Settings, cdc_conn: psycopg.Connection
) -> None:
    user, _ = _cdc_login(seeded)
    assert user != seeded.postgres.user, "Debezium logs in as the administrator"
    assert _attributes(seeded, user) == {
        "rolsuper": False, "rolreplication": True, "rolcanlogin": True,
        "rolcreatedb": False, "rolcreaterole": False, "rolbypassrls": False}
    slot = unique("test_cdc_role_")
    cdc_conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    cdc_conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_debezium_role_reads_the_captured_tables(cdc_conn: psycopg.Connection) -> None:
    for table in CAPTURED:
        row = cdc_conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
        assert row is not None and row[0] >= 0


@pytest.mark.parametrize("statement", [
    "INSERT INTO stations (station_id, name, lat, lon, capacity) "
    "VALUES ('station-cdc', 'x', 0, 0, 1)",
    "UPDATE bikes SET status = 'maintenance'",
    "DELETE FROM rentals",
    "TRUNCATE rentals",
    "CREATE TABLE cdc_probe (id int)",
    "CREATE TEMP TABLE cdc_probe (id int)",
    "CREATE SCHEMA cdc_probe",
    "CREATE PUBLICATION cdc_probe FOR TABLE rentals",
    "ALTER TABLE rentals REPLICA IDENTITY DEFAULT",
])
def test_debezium_role_can_neither_change_nor_create(cdc_conn: psycopg.Connection,
                                                     statement: str) -> None:
    _denied(cdc_conn, statement)


def test_the_publication_is_the_administrators_for_exactly_the_captured_tables(
    seeded: Settings,
) -> None:
    config = load_connector_file(CONNECTORS_DIR / "rentals-cdc.json", seeded).config
    assert config["publication.autocreate.mode"] == "disabled"
    with postgres_connect(seeded) as admin:
        owner = admin.execute("SELECT pubowner::regrole::text FROM pg_publication "
                              "WHERE pubname = %s", (config["publication.name"],)).fetchone()
        tables = admin.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = "
                               "%s", (config["publication.name"],)).fetchall()
    assert owner == (seeded.postgres.user,)
    assert sorted(t for (t,) in tables) == sorted(CAPTURED)


# -- the application's role --------------------------------------------------------------


def test_the_app_role_is_neither_superuser_nor_replication(seeded: Settings) -> None:
    with connect(seeded) as conn:
        row = conn.execute("SELECT current_user").fetchone()
        assert row is not None
        user = row[0]
        assert user != seeded.postgres.user, "the rentals application logs in as the administrator"
        assert _attributes(seeded, user) == {
            "rolsuper": False, "rolreplication": False, "rolcanlogin": True,
            "rolcreatedb": False, "rolcreaterole": False, "rolbypassrls": False}
        _denied(conn, "SELECT pg_create_logical_replication_slot('app_probe', 'pgoutput')")
        _denied(conn, "CREATE ROLE app_probe")
        _denied(conn, "CREATE DATABASE app_probe")


def test_the_app_role_changes_the_rentals_tables(seeded: Settings) -> None:
    with connect(seeded) as conn, conn.transaction(force_rollback=True):
        conn.execute("INSERT INTO stations (station_id, name, lat, lon, capacity) "
                     "VALUES ('station-app-probe', 'probe', 52.5, 13.4, 10)")
        conn.execute("UPDATE stations SET capacity = 12 WHERE station_id = 'station-app-probe'")
        conn.execute("DELETE FROM stations WHERE station_id = 'station-app-probe'")
        apply_schema(conn)  # the owner runs its own schema (seed does, every time)


# -- the step that makes them ------------------------------------------------------------


def test_provision_again_changes_nothing(seeded: Settings) -> None:
    before = _snapshot(seeded)
    result = invoke_cli("rentals", "provision")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nothing changed" in result.stderr, result.stderr
    assert _snapshot(seeded) == before


def test_provision_restores_a_password_that_differs_from_env(
    seeded: Settings, cdc_conn: psycopg.Connection
) -> None:
    user, _ = _cdc_login(seeded)
    with postgres_connect(seeded) as admin:
        admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(user), sql.Literal(unique("stale-"))))
    result = invoke_cli("rentals", "provision")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"set the password of role {user}" in result.stderr
    assert "nothing changed" in invoke_cli("rentals", "provision").stderr


def test_provision_upgrades_a_database_made_before_the_roles(seeded: Settings) -> None:
    """A database whose tables the administrator made and owns (as before the roles):
    provision hands them to the app role and lets Debezium's role read them."""
    database = unique("test_roles_upgrade_")
    pg = seeded.postgres
    with postgres_connect(seeded, dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        with postgres_connect(seeded, dbname=database) as old:
            apply_schema(old)
        result = invoke_cli("rentals", "provision", env={"LAKEHOUSE_POSTGRES__DATABASE": database})
        assert result.returncode == 0, result.stdout + result.stderr
        with postgres_connect(seeded, dbname=database) as admin:
            owners = dict(admin.execute(
                "SELECT relname, relowner::regrole::text FROM pg_class WHERE relname = "
                "ANY(%s)", (list(CAPTURED),)).fetchall())
        assert owners == dict.fromkeys(CAPTURED, pg.app_user)
        upgraded = seeded.model_copy(update={"postgres": pg.model_copy(
            update={"database": database})})
        with connect(upgraded) as app:
            app.execute("INSERT INTO stations (station_id, name, lat, lon, capacity) "
                        "VALUES ('station-1', 's', 52.5, 13.4, 10)")
        user, password = _cdc_login(upgraded)
        with psycopg.connect(host=pg.host, port=pg.port, dbname=database, user=user,
                             password=password, autocommit=True) as cdc:
            assert cdc.execute("SELECT count(*) FROM stations").fetchone() == (1,)
            _denied(cdc, "DELETE FROM stations")
        again = invoke_cli("rentals", "provision", env={"LAKEHOUSE_POSTGRES__DATABASE": database})
        assert "nothing changed" in again.stderr, again.stdout + again.stderr
    finally:
        with postgres_connect(seeded, dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(database)))
