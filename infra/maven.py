"""Resolve the JVM artifacts of infra/jvm/pom.xml from Maven Central into the tools folder,
and build the project's own Java (the Connect worker's connector guard) beside them.

One class-path folder per Maven module (kafka, connect, connect-plugins, spark). The poms
are fingerprinted: while they are unchanged and the folders are in place, Maven is not run
at all (a second setup works offline). A changed pom rebuilds every folder from scratch, so
an old version of a jar never lingers next to its replacement.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from settings.layout import StateLayout
from settings.report import Report

JVM_DIR = Path(__file__).with_name("jvm")
MODULES = ("kafka", "connect", "connect-plugins", "spark")
_DOWNLOADED = re.compile(r"Downloaded from [^:]+: \S+ \(([\d.]+) (B|kB|MB|GB) at")
_UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}



class MavenError(Exception):
    """Maven is missing or could not resolve an artifact; says what to do."""


def manifest_fingerprint() -> str:
    """sha256 over every pom, the Maven settings and the project's own Java sources:
    changes when any version or source changes."""
    jvm_dir = JVM_DIR
    digest = hashlib.sha256()
    for path in sorted(p for p in jvm_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(jvm_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def folders_in_place(layout: StateLayout) -> bool:
    """Every module's folder exists and holds something."""
    folders = [layout.jvm_module(module) for module in MODULES]
    return all(folder.is_dir() and any(folder.iterdir()) for folder in folders)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def resolve(layout: StateLayout, report: Report, log_file: Path) -> None:
    """Run Maven into a fresh folder, then swap it in place of the old one."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("`mvn` not found: install Maven (`sudo apt-get install maven`); "
                         "it resolves infra/jvm/pom.xml from Maven Central")
    partial = layout.jvm.with_name("jvm.partial")
    build = partial.with_name(partial.name + ".build")  # the poms' <directory>: classes
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(build, ignore_errors=True)
    report("resolving JVM artifacts of infra/jvm/pom.xml with Maven "
           f"(first time ~1-2 min, ~800 MB; log: {log_file})")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("w") as log:
        result = subprocess.run(
            [mvn, "-B", "-gs", str(JVM_DIR / "maven-settings.xml"),
             "-f", str(JVM_DIR / "pom.xml"), "package", f"-Djvm.out={partial}"],
            stdout=log, stderr=subprocess.STDOUT, check=False,
        )
    shutil.rmtree(build, ignore_errors=True)
    output = log_file.read_text(errors="replace")
    if result.returncode != 0:
        errors = [line for line in output.splitlines() if "[ERROR]" in line][:3]
        raise MavenError("Maven could not resolve infra/jvm/pom.xml "
                         f"(exit {result.returncode}):\n  " + "\n  ".join(errors) +
                         f"\n  full log: {log_file}")
    fetched = [float(n) * _UNITS[unit] for n, unit in _DOWNLOADED.findall(output)]
    if fetched:
        report(f"maven: downloaded {len(fetched)} files ({sum(fetched) / 1e6:.0f} MB); "
               "the rest came from the local Maven repository (~/.m2)")
    else:
        report("maven: every artifact came from the local Maven repository (~/.m2)")
    shutil.rmtree(layout.jvm, ignore_errors=True)
    partial.replace(layout.jvm)
    for module in MODULES:
        folder = layout.jvm_module(module)
        jars = list(folder.rglob("*.jar"))
        report(f"installed: {module}: {len(jars)} jars ({_size(folder) / 1e6:.0f} MB) "
               f"-> {folder}")
