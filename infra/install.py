"""Place the stack's third-party programs and jars at their pinned versions.

Idempotent: anything already in place at the pinned version is left alone, and the
caller learns that nothing was done.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra import maven
from infra.airflow_env import AirflowInstallError, ensure_airflow_venv
from settings.layout import StateLayout
from settings.report import Report

MANIFEST_PATH = Path(__file__).with_name("artifacts.yaml")
MIN_JAVA_MAJOR = 17



class SetupError(Exception):
    """Something the machine lacks that setup cannot fix by itself; says what to install."""


def load_manifest(path: Path = MANIFEST_PATH) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def java_version() -> str:
    """Major version of `java` on PATH, or SetupError saying how to get Java 17."""
    advice = (
        f"Java {MIN_JAVA_MAJOR} or newer is required (Kafka Connect and Spark run on it): "
        "install it with `sudo apt-get install openjdk-17-jre-headless` "
        "(or any JDK 17+, with `java` on PATH)"
    )
    java = shutil.which("java")
    if java is None:
        raise SetupError(f"`java` not found. {advice}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise SetupError(f"could not read the version of {java}. {advice}")
    major = int(match.group(1))
    if major == 1:  # "1.8.0" style
        major = int(match.group(2) or 0)
    if major < MIN_JAVA_MAJOR:
        raise SetupError(f"{java} is Java {major}. {advice}")
    return str(major)


def missing_debian_packages(packages: list[str]) -> list[str]:
    missing = []
    for package in packages:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True, text=True, check=False,
        )
        if "install ok installed" not in out.stdout:
            missing.append(package)
    return missing


def install_debian_packages(packages: list[str], report: Report) -> None:
    if not packages:
        return
    if shutil.which("apt-get") is None:
        raise SetupError(
            f"missing system packages {packages} and no apt-get here: install PostgreSQL "
            "(server binaries) and Maven with your package manager"
        )
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise SetupError(f"run `sudo apt-get install -y {' '.join(packages)}` and retry")
        prefix = ["sudo", "-n"]
    report(f"installing Debian packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        result = subprocess.run(prefix + command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SetupError(
                f"`{' '.join(command)}` failed ({result.returncode}): "
                f"{result.stderr.strip()[-800:]}\n"
                f"install them yourself: sudo apt-get install -y {' '.join(packages)}"
            )


@dataclass
class _Installer:
    layout: StateLayout
    report: Report
    actions: int = 0

    def _record(self) -> dict[str, Any]:
        if self.layout.install_record.exists():
            return json.loads(self.layout.install_record.read_text())
        return {}

    def _save_record(self, record: dict[str, Any]) -> None:
        self.layout.install_record.write_text(json.dumps(record, indent=2, sort_keys=True))

    def jvm_artifacts(self) -> None:
        """The class paths of infra/jvm/pom.xml, re-resolved only when a pom changed."""
        fingerprint = maven.manifest_fingerprint()
        if self._record().get("jvm") == fingerprint and maven.folders_in_place(self.layout):
            self.report(f"ok: JVM artifacts of infra/jvm/pom.xml in place ({self.layout.jvm})")
            return
        try:
            maven.resolve(self.layout, self.report, self.layout.logs / "setup-maven.log")
        except maven.MavenError as exc:
            raise SetupError(str(exc)) from exc
        record = self._record()
        record["jvm"] = fingerprint
        self._save_record(record)
        self.actions += 1

    def go_build(self, build: dict[str, Any]) -> None:
        """`go install module@version` into the tools folder (MinIO: no maintained binary
        of its community edition exists to download)."""
        label = f"{build['name']} ({build['module']}@{build['version']})"
        target = self.layout.tools / build["target"]
        if target.exists() and self._record().get(build["name"]) == build["version"]:
            self.report(f"ok: {label} already built")
            return
        found = go_version()
        if found is None or found < _version_tuple(build["min_go"]):
            have = "no `go` on PATH" if found is None else f"Go {'.'.join(map(str, found))}"
            raise SetupError(f"{label} ({build['purpose']}) is built from source and needs "
                             f"Go >= {build['min_go']} on PATH ({have}): install Go "
                             f"{build['min_go']} or newer (https://go.dev/doc/install) and "
                             "run `make setup` again")
        began = time.monotonic()
        self.report(f"building {label} with `go install` (first time: several minutes)")
        gobin = target.parent / f".{build['name']}.gobin"
        shutil.rmtree(gobin, ignore_errors=True)
        result = subprocess.run(
            ["go", "install", f"{build['module']}@{build['version']}"],
            env={**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-trimpath",
                 "CGO_ENABLED": "0"},
            capture_output=True, text=True, check=False,
        )
        built = gobin / Path(build["module"]).name
        if result.returncode != 0 or not built.exists():
            raise SetupError(f"`go install {build['module']}@{build['version']}` failed "
                             f"({result.returncode}): {result.stderr.strip()[-800:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        built.replace(target)
        shutil.rmtree(gobin, ignore_errors=True)
        record = self._record()
        record[build["name"]] = build["version"]
        self._save_record(record)
        self.report(f"installed: {label} -> {target} "
                    f"(built in {time.monotonic() - began:.0f} s)")
        self.actions += 1


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def go_version() -> tuple[int, ...] | None:
    """(major, minor[, patch]) of `go` on PATH, or None without one."""
    if shutil.which("go") is None:
        return None
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True,
                         check=False).stdout.strip()  # e.g. go1.26.8
    return _version_tuple(out) if out.startswith("go") else None


def run_setup(layout: StateLayout, report: Report, manifest: dict[str, Any] | None = None,
              then: Callable[[], int] | None = None) -> int:
    """Make the machine ready for the embedded stack; returns how many things it changed.

    Airflow's venv (a pip install of its own lock) installs in a thread beside the rest:
    the JVM artifacts, the Go build and `then` (the Spark class archive, which needs the
    jars), run once they are in place. One after the other they were most of a fresh
    clone's setup, each leaving a core idle."""
    manifest = manifest or load_manifest()
    report(f"ok: Java {java_version()}")
    layout.ensure()
    installer = _Installer(layout, report)
    with ThreadPoolExecutor(1, thread_name_prefix="airflow-venv") as pool:
        airflow = pool.submit(ensure_airflow_venv, layout, report)
        missing = missing_debian_packages(manifest["debian_packages"])
        if missing:
            install_debian_packages(missing, report)
            installer.actions += 1
        else:
            report(f"ok: Debian packages present ({', '.join(manifest['debian_packages'])})")
        installer.jvm_artifacts()
        for build in manifest.get("go_builds", []):
            installer.go_build(build)
        if then is not None:
            installer.actions += then()
        try:
            installer.actions += int(airflow.result())
        except AirflowInstallError as exc:
            raise SetupError(str(exc)) from exc
    return installer.actions
