"""Airflow's own virtualenv (installed from the project's lock) and the environment its
processes run with: every setting as an AIRFLOW__* variable, nothing in airflow.cfg, so
the settings stay the one source of truth."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from settings import Settings
from settings.layout import StateLayout
from settings.report import Report

LOCK = Path(__file__).resolve().parents[1] / "orchestration" / "requirements-airflow.lock"
DAGS_FOLDER = LOCK.parent / "dags"
PIP_VERSION = "25.3"
# Variables of the caller that must not reach Airflow's interpreter (they point at another).
_FOREIGN = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


class AirflowInstallError(Exception):
    """The Airflow virtualenv could not be built from the lock."""


def venv_dir(layout: StateLayout) -> Path:
    return layout.tools / "airflow" / "venv"


def airflow_bin(layout: StateLayout) -> Path:
    return venv_dir(layout) / "bin" / "airflow"


def _stamp(layout: StateLayout) -> Path:
    return venv_dir(layout) / ".installed-lock"


def lock_digest() -> str:
    return hashlib.sha256(LOCK.read_bytes()).hexdigest()


def installed_version(layout: StateLayout) -> str:
    """apache-airflow's version in the venv, from its dist-info folder (no interpreter)."""
    found = sorted(venv_dir(layout).glob("lib/python*/site-packages/apache_airflow-*.dist-info"))
    return found[0].name.removesuffix(".dist-info").split("-")[1] if found else "?"


def ensure_airflow_venv(layout: StateLayout, report: Report) -> bool:
    """Build the venv from the lock unless it was built from this very lock; True if built.
    A venv of its own: Airflow's pins clash with dbt's and Great Expectations'."""
    stamp = _stamp(layout)
    digest = lock_digest()
    if stamp.exists() and stamp.read_text().strip() == digest and airflow_bin(layout).exists():
        report(f"ok: Airflow {installed_version(layout)} in {venv_dir(layout)}")
        return False
    began = time.monotonic()
    report(f"installing Airflow from {LOCK.name} into {venv_dir(layout)} "
           "(first time: ~1-3 min)")
    target = venv_dir(layout)
    log = layout.logs / "setup-airflow.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    python = target / "bin" / "python"
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(target)],
        [str(python), "-m", "pip", "install", "--quiet", "--upgrade", f"pip=={PIP_VERSION}"],
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(LOCK)],
        [str(python), "-m", "pip", "check"],
    ]
    with log.open("a") as out:
        for step in steps:
            out.write(f"\n$ {' '.join(step)}\n")
            out.flush()
            result = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False,
                                    env=clean_environment(os.environ))
            if result.returncode != 0:
                raise AirflowInstallError(f"`{' '.join(step)}` failed ({result.returncode}); "
                                          f"log: {log}")
    stamp.write_text(digest + "\n")
    report(f"installed: Airflow {installed_version(layout)} -> {target} "
           f"in {time.monotonic() - began:.0f} s")
    return True


def clean_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in _FOREIGN}


def derived_secret(settings: Settings, purpose: str) -> bytes:
    """A 32-byte secret for `purpose`, derived from airflow.secret_key (one value in .env
    seeds the API's JWT secret and the Fernet key)."""
    seed = settings.airflow.secret_key
    if seed is None:
        raise ValueError("LAKEHOUSE_AIRFLOW__SECRET_KEY is not set (environment or .env; "
                         "`make setup` adds it)")
    return hmac.new(seed.get_secret_value().encode(), purpose.encode(), hashlib.sha256).digest()


def admin_password(settings: Settings) -> str:
    if settings.airflow.admin_password is None:
        raise ValueError("LAKEHOUSE_AIRFLOW__ADMIN_PASSWORD is not set (environment or .env; "
                         "`make setup` adds it)")
    return settings.airflow.admin_password.get_secret_value()


def airflow_home(settings: Settings) -> Path:
    return settings.state_path / "airflow"


def api_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.embedded.airflow_port}"


def passwords_file(settings: Settings) -> Path:
    return airflow_home(settings) / "simple_auth_manager_passwords.json"


def write_passwords_file(settings: Settings) -> None:
    """The UI user's password as the simple auth manager reads it (mode 0600)."""
    path = passwords_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({settings.airflow.admin_user: admin_password(settings)}, handle)


def database_url(settings: Settings) -> str:
    pg = settings.postgres
    if pg.password is None:
        raise ValueError("LAKEHOUSE_POSTGRES__PASSWORD is not set")
    from urllib.parse import quote

    return (f"postgresql+psycopg2://{quote(pg.user, safe='')}:"
            f"{quote(pg.password.get_secret_value(), safe='')}@{pg.host}:{pg.port}/"
            f"{settings.airflow.database}")


def airflow_environment(settings: Settings) -> dict[str, str]:
    """What every Airflow process (and so every task) runs with. The LAKEHOUSE_* values
    are the resolved settings, so a task's `lakehouse` command sees the same profile."""
    home = airflow_home(settings)
    url = api_url(settings)
    fernet = base64.urlsafe_b64encode(derived_secret(settings, "airflow-fernet")).decode()
    return {
        **clean_environment(os.environ),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(settings.airflow.parallelism),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__CORE__FERNET_KEY": fernet,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{settings.airflow.admin_user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file(settings)),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url(settings),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(settings.embedded.airflow_port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": derived_secret(settings, "airflow-jwt").hex(),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # the DAG files read these (orchestration/dags/lakehouse_dags.py)
        "LAKEHOUSE_PROFILE": settings.profile,
        "LAKEHOUSE_SCRAPER__SOURCES_DIR": str(settings.project_path(
            settings.scraper.sources_dir)),
        "LAKEHOUSE_AIRFLOW__RETRIES": str(settings.airflow.retries),
        "LAKEHOUSE_AIRFLOW__RETRY_DELAY_SECONDS": str(settings.airflow.retry_delay_seconds),
    }
