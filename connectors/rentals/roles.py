"""Least-privilege PostgreSQL roles of the rentals database, set up by its administrator.

- `postgres.app_user`, the rentals application (seed, traffic): LOGIN and nothing else
  cluster-wide; owns the rentals database and its tables, so it runs its schema and DML.
- `postgres.cdc_user`, Debezium: LOGIN REPLICATION; CONNECT on the database and SELECT on
  the captured tables, nothing else (no DML, no CREATE, no TEMP).
- the publication Debezium reads, made by the administrator for exactly the captured
  tables, so the CDC role needs no CREATE on the database (the connector's
  `publication.autocreate.mode` is `disabled`).

The slot, publication and captured tables come from the connector file (one place).
`provision` is idempotent: a second run changes nothing (roles, owners, privileges,
passwords and the publication are compared first), and it upgrades a database made before
these roles existed (objects owned by the administrator move to the app role).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from clients import postgres_connect
from connectors.connect_config import CONNECTORS_DIR, ConnectorFileError, load_connector_dir
from connectors.rentals.database import apply_schema
from settings import Settings
from settings.model import PostgresLogin

# Debezium's PostgreSQL connector fields that name what it captures.
SLOT_FIELD = "slot.name"
PUBLICATION_FIELD = "publication.name"
TABLES_FIELD = "table.include.list"
_TABLE = re.compile(r"^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$")
# Cluster-wide attributes of both roles: (LOGIN, REPLICATION) and all else off.
_ATTRIBUTES = ("rolcanlogin", "rolreplication", "rolsuper", "rolcreatedb", "rolcreaterole",
               "rolbypassrls")


@dataclass(frozen=True)
class CdcCapture:
    """What the repository's Debezium connector reads: its slot, publication and tables."""

    connector: str
    slot: str
    publication: str
    tables: tuple[tuple[str, str], ...]  # (schema, table)


def cdc_capture(settings: Settings) -> CdcCapture | None:
    """The capture of the connector file that names a publication (None if none does);
    ValueError naming the file and field when the connector files cannot be used."""
    try:
        connectors = load_connector_dir(CONNECTORS_DIR, settings)
    except ConnectorFileError as exc:
        raise ValueError(f"connector files: {exc}") from exc
    for connector in connectors:
        config = connector.config
        if PUBLICATION_FIELD not in config:
            continue
        tables = []
        for entry in config.get(TABLES_FIELD, "").split(","):
            match = _TABLE.match(entry.strip())
            if not match:
                raise ValueError(f"{connector.path}: {TABLES_FIELD}: {entry.strip()!r} is not "
                                 "a plain schema.table name (the publication lists tables)")
            tables.append((match[1], match[2]))
        return CdcCapture(connector.name, config[SLOT_FIELD], config[PUBLICATION_FIELD],
                          tuple(tables))
    return None


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """PostgreSQL's SCRAM-SHA-256 verifier of `password`: ALTER ROLE stores it as is, so the
    clear password never reaches the server (nor its log, should the statement fail)."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return (f"SCRAM-SHA-256${iterations}:{b64(salt)}$"
            f"{b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}")


def _password_works(settings: Settings, role: PostgresLogin) -> bool:
    try:
        psycopg.connect(**settings.postgres.dsn_kwargs(role), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        if "password authentication failed" in str(exc):
            return False
        raise
    return True


def _ensure_role(conn: psycopg.Connection, name: str, replication: bool) -> str | None:
    """The role with LOGIN, REPLICATION as asked and every other power off."""
    wanted = (True, replication, False, False, False, False)
    row = conn.execute(sql.SQL("SELECT {} FROM pg_roles WHERE rolname = %s").format(
        sql.SQL(", ").join(map(sql.Identifier, _ATTRIBUTES))), (name,)).fetchone()
    if row is not None and tuple(row) == wanted:
        return None
    options = sql.SQL("LOGIN {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS").format(
        sql.SQL("REPLICATION" if replication else "NOREPLICATION"))
    verb = "CREATE" if row is None else "ALTER"
    conn.execute(sql.SQL(verb + " ROLE {} WITH {}").format(sql.Identifier(name), options))
    return f"{'created' if row is None else 'reset the attributes of'} role {name}"


def _set_password(conn: psycopg.Connection, name: str, password: str) -> None:
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
        sql.Identifier(name), sql.Literal(scram_verifier(password))))


def _privileges(conn: psycopg.Connection) -> tuple[object, ...]:
    """Access lists of the database, schema public and its objects (to tell whether the
    GRANTs and REVOKEs changed anything)."""
    return tuple(conn.execute(
        "SELECT datname::text, datacl::text FROM pg_database "
        "WHERE datname = current_database() "
        "UNION ALL SELECT 'schema ' || nspname, nspacl::text FROM pg_namespace "
        "WHERE nspname = 'public' "
        "UNION ALL SELECT 'relation ' || relname, relacl::text "
        "FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY 1, 2").fetchall())


def _transfer_ownership(conn: psycopg.Connection, admin: str, app: str) -> list[str]:
    """Tables, sequences and functions of schema public that the administrator owns (a
    database from before the app role) become the app role's."""
    moved = []
    relations = conn.execute(
        "SELECT c.relname, c.relkind FROM pg_class c WHERE c.relnamespace = "
        "'public'::regnamespace AND c.relowner = %s::regrole AND c.relkind IN "
        "('r', 'p', 'v', 'm', 'f', 'S') AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE "
        "d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))",
        (admin,)).fetchall()
    for name, kind in relations:
        keyword = "SEQUENCE" if kind == "S" else "TABLE"
        conn.execute(sql.SQL("ALTER " + keyword + " {} OWNER TO {}").format(
            sql.Identifier("public", name), sql.Identifier(app)))
        moved.append(name)
    functions = conn.execute(
        "SELECT oid::regprocedure::text FROM pg_proc WHERE pronamespace = "
        "'public'::regnamespace AND proowner = %s::regrole", (admin,)).fetchall()
    for (signature,) in functions:
        conn.execute(sql.SQL("ALTER FUNCTION {} OWNER TO {}").format(
            sql.SQL(signature), sql.Identifier(app)))
        moved.append(signature)
    return moved


def ensure_publication(conn: psycopg.Connection, name: str,
                       tables: tuple[tuple[str, str], ...]) -> str | None:
    """Publication `name` for exactly `tables` (made or corrected by the connection's role,
    the administrator), or None when it already is."""
    present = {tuple(row) for row in conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (name,)).fetchall()}
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                          (name,)).fetchone()
    if exists and present == set(tables):
        return None
    listed = sql.SQL(", ").join(sql.Identifier(*table) for table in tables)
    verb = "ALTER PUBLICATION {} SET TABLE {}" if exists else "CREATE PUBLICATION {} FOR TABLE {}"
    conn.execute(sql.SQL(verb).format(sql.Identifier(name), listed))
    return f"{'set the tables of' if exists else 'created'} publication {name}"


def provision(settings: Settings, database: str | None = None) -> list[str]:
    """Roles, database, schema, privileges and publication as the module says, made by the
    administrator (`postgres.user`) in `database` (default `postgres.database`); what it
    changed (empty: everything was in place)."""
    if database is not None:
        settings = settings.model_copy(update={
            "postgres": settings.postgres.model_copy(update={"database": database})})
    pg = settings.postgres
    app, cdc = pg.login("app")[0], pg.login("cdc")[0]  # ValueError if a password is unset
    capture = cdc_capture(settings)
    changes: list[str] = []
    with postgres_connect(settings, dbname="postgres") as admin:
        for name, replication in ((app, False), (cdc, True)):
            change = _ensure_role(admin, name, replication)
            changes += [change] if change else []
        owner = admin.execute("SELECT datdba::regrole::text FROM pg_database "
                              "WHERE datname = %s", (pg.database,)).fetchone()
        if owner is None:
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(pg.database), sql.Identifier(app)))
            changes.append(f"created database {pg.database} owned by {app}")
        elif owner[0] != app:
            admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(pg.database), sql.Identifier(app)))
            changes.append(f"database {pg.database} now owned by {app} (was {owner[0]})")
    names = {"db": sql.Identifier(pg.database), "app": sql.Identifier(app),
             "cdc": sql.Identifier(cdc)}
    with postgres_connect(settings) as conn:
        before = _privileges(conn)
        moved = _transfer_ownership(conn, pg.user, app)
        if moved:
            changes.append(f"{app} now owns {', '.join(moved)}")
        for statement in (
            "REVOKE ALL ON DATABASE {db} FROM PUBLIC",  # no CONNECT, TEMP for other roles
            "GRANT CONNECT ON DATABASE {db} TO {cdc}",
            "REVOKE CREATE ON SCHEMA public FROM PUBLIC",  # PostgreSQL < 15 grants it
            "GRANT USAGE, CREATE ON SCHEMA public TO {app}",
            "GRANT USAGE ON SCHEMA public TO {cdc}",
        ):
            conn.execute(sql.SQL(statement).format(**names))
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL ROLE {app}").format(**names))
            apply_schema(conn)  # the tables exist, owned by the app, for what follows
        if capture is not None:
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {cdc}").format(
                sql.SQL(", ").join(sql.Identifier(*table) for table in capture.tables),
                **names))
            change = ensure_publication(conn, capture.publication, capture.tables)
            changes += [change] if change else []
        if _privileges(conn) != before:
            changes.append(f"granted {app} and {cdc} their privileges on {pg.database}")
    logins: tuple[PostgresLogin, ...] = ("app", "cdc")
    for role in logins:
        if not _password_works(settings, role):
            user, password = pg.login(role)
            with postgres_connect(settings, dbname="postgres") as admin:
                _set_password(admin, user, password)
            changes.append(f"set the password of role {user}")
    return changes
