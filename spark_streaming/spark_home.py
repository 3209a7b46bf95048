"""A Spark home for pip-installed pyspark whose Python workers import compiled pyspark.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and the py4j zip) first on every Python
worker's path. For pip-installed pyspark that zip duplicates the installed package, but
without bytecode: each worker process compiles pyspark from source (about 1 s of CPU per
process, several processes per query start), and every task's `importlib.invalidate_caches()`
makes each zip importer re-read the archive's directory (one importer per imported
subpackage). Profiled on the bronze benchmark, that was about a quarter of the Python
workers' CPU. This home links everything of the installed pyspark except those zips, so
workers import the installed package with its cached bytecode; the JVM finds the same
jars and scripts.

Only for local masters and only when the user has not set SPARK_HOME (a real Spark
installation, or a cluster's, is left alone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

import pyspark

_ZIPS_DIR = Path("python") / "lib"


def _installed_home() -> Path:
    return Path(pyspark.__file__).resolve().parent


def _is_current(home: Path, installed: Path) -> bool:
    jars = home / "jars"
    return jars.is_symlink() and jars.resolve() == (installed / "jars").resolve()


def _build(target: Path, installed: Path) -> None:
    staging = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
    staging.mkdir(parents=True)
    try:
        for entry in installed.iterdir():
            if entry.name != "python":
                (staging / entry.name).symlink_to(entry)
        python_dir = staging / "python"
        python_dir.mkdir()
        for entry in (installed / "python").iterdir():
            if entry.name != "lib":
                (python_dir / entry.name).symlink_to(entry)
        (staging / _ZIPS_DIR).mkdir()  # the zips' place, left empty on purpose
        if target.exists():  # stale (pyspark reinstalled elsewhere): replace it
            shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(OSError):  # another process won the race: use theirs
            staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def prepare_spark_home(folder: Path) -> Path | None:
    """Make (once) and return a zip-less Spark home under `folder`, or None when the
    installed pyspark has no worker zips to hide."""
    installed = _installed_home()
    if not (installed / _ZIPS_DIR / "pyspark.zip").exists() or not (installed / "jars").is_dir():
        return None
    home = folder / f"spark-home-{pyspark.__version__}"
    if not _is_current(home, installed):
        folder.mkdir(parents=True, exist_ok=True)
        _build(home, installed)
    return home if _is_current(home, installed) else None


def use_compiled_pyspark(folder: Path) -> None:
    """Point SPARK_HOME at the zip-less home unless the user chose a Spark home."""
    if os.environ.get("SPARK_HOME"):
        return
    home = prepare_spark_home(folder)
    if home is not None:
        os.environ["SPARK_HOME"] = str(home)
