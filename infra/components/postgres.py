"""PostgreSQL cluster of the project's own (initdb), wal_level=logical for Debezium CDC."""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg

from clients import postgres_connect
from infra.components.base import Component, Port, StackError
from settings.model import PostgresLogin

# PostgreSQL refuses to run as root; as root the cluster runs as this system user, in a
# folder it can reach (a fresh clone may sit under a 0700 folder of root's).
SYSTEM_USER = "postgres"
ROOT_DATA_BASE = Path("/var/lib/postgresql/lakehouse")


def postgres_bin_dir() -> Path | None:
    """Debian's newest /usr/lib/postgresql/<v>/bin, else the folder of `postgres` on PATH."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("postgres")
    return Path(found).parent if found else None


class Postgres(Component):
    name = "postgres"
    marker = "postgres"
    graceful_signal = signal.SIGINT  # "fast" shutdown: roll back clients, then stop
    start_timeout = 30.0

    @property
    def bin_dir(self) -> Path:
        return postgres_bin_dir() or Path("/usr/lib/postgresql/<version>/bin")

    def address(self) -> str:
        pg = self.settings.postgres
        return f"postgresql://{pg.host}:{pg.port}/{pg.database}"

    def ports(self) -> list[Port]:
        return [Port("postgres", self.settings.postgres.port, "LAKEHOUSE_POSTGRES__PORT")]

    def binaries(self) -> list[Path]:
        return [self.bin_dir / "postgres", self.bin_dir / "initdb"]

    def run_as(self) -> str | None:
        return SYSTEM_USER if os.geteuid() == 0 else None

    def working_dir(self) -> Path:
        return self.cluster_dir

    @property
    def cluster_dir(self) -> Path:
        """Folder holding data and socket; under the state folder unless running as root."""
        link = self.layout.data / "postgres"
        if os.geteuid() != 0:
            return link
        key = hashlib.sha256(str(self.layout.root).encode()).hexdigest()[:12]
        return ROOT_DATA_BASE / key

    @property
    def data_dir(self) -> Path:
        return self.cluster_dir / "data"

    def _as_owner(self, path: Path) -> None:
        user = self.run_as()
        if user:
            entry = pwd.getpwnam(user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def prepare(self) -> None:
        logins: tuple[PostgresLogin, ...] = ("admin", "app", "cdc")
        try:  # every password is set before anything starts
            for role in logins:
                self.settings.postgres.login(role)
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc
        password = self.settings.postgres.password
        assert password is not None
        if self.run_as():
            try:
                pwd.getpwnam(SYSTEM_USER)
            except KeyError as exc:
                raise StackError(self.name, f"running as root needs the `{SYSTEM_USER}` "
                                 "system user (Debian's postgresql package creates it)") from exc
            ROOT_DATA_BASE.mkdir(parents=True, exist_ok=True)
            self._as_owner(ROOT_DATA_BASE)
            link = self.layout.data / "postgres"
            if not link.is_symlink():
                # The state folder is new (fresh clone, `lakehouse clean`, deleted by hand):
                # a cluster at this path belongs to a state folder that no longer exists and
                # was initialised with that folder's password.
                if self.cluster_dir.exists():
                    self.notes.append(f"removed {self.cluster_dir}, a cluster left by an "
                                      f"earlier state folder at {self.layout.root}")
                    shutil.rmtree(self.cluster_dir)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.cluster_dir, target_is_directory=True)
        self.cluster_dir.mkdir(parents=True, exist_ok=True)
        self._as_owner(self.cluster_dir)
        if (self.data_dir / "PG_VERSION").exists():
            return
        pwfile = self.cluster_dir / "initdb.pw"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(password.get_secret_value() + "\n")
        self._as_owner(pwfile)
        try:
            result = subprocess.run(
                [str(self.bin_dir / "initdb"), "-D", str(self.data_dir),
                 "-U", self.settings.postgres.user, f"--pwfile={pwfile}",
                 "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8"],
                capture_output=True, text=True, user=self.run_as(), group=self.run_as(),
                cwd=self.cluster_dir, check=False,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.process.log_file.parent.mkdir(parents=True, exist_ok=True)
            with self.process.log_file.open("a") as log:
                log.write(result.stdout + result.stderr)
            raise StackError(self.name, f"initdb failed ({result.returncode})",
                             self.process.log_file)

    def command(self) -> list[str]:
        pg = self.settings.postgres
        return [
            str(self.bin_dir / "postgres"),
            "-D", str(self.data_dir),
            "-c", f"listen_addresses={pg.host}",
            "-c", f"port={pg.port}",
            "-c", f"unix_socket_directories={self.cluster_dir}",
            "-c", "wal_level=logical",
            "-c", "max_wal_senders=10",
            "-c", "max_replication_slots=10",
            "-c", "shared_buffers=64MB",
            "-c", "logging_collector=off",
        ]

    def healthy(self) -> bool:
        try:
            with postgres_connect(self.settings, dbname="postgres", timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            if "password authentication failed" in str(exc):
                raise StackError(
                    self.name,
                    f"the cluster in {self.data_dir} was initialised with another password "
                    "than LAKEHOUSE_POSTGRES__PASSWORD; restore that password (.env or "
                    "environment), or run `lakehouse clean` to re-create the cluster (this "
                    "deletes the rentals database)",
                    self.process.log_file,
                ) from exc
            raise
        return True

    def after_healthy(self) -> None:
        """The rentals database with its least-privilege roles, schema and CDC publication
        (idempotent, so a cluster from before the roles is upgraded on its next start)."""
        from connectors.rentals.roles import provision

        try:
            changes = provision(self.settings)
        except (psycopg.Error, ValueError) as exc:
            raise StackError(self.name, f"setting up the rentals database's roles failed: "
                             f"{exc}", self.process.log_file) from exc
        if changes:
            self.notes.append("rentals database: " + "; ".join(changes))

    def version(self) -> str:
        with postgres_connect(self.settings, dbname="postgres", timeout=2) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]).split()[0] if row else "?"

    def remove_data(self) -> None:
        """Delete the cluster's files (used by `lakehouse clean`)."""
        shutil.rmtree(self.cluster_dir, ignore_errors=True)
        link = self.layout.data / "postgres"
        if link.is_symlink():
            link.unlink()
