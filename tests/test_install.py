"""Setup: idempotent, JVM class paths from infra/jvm/pom.xml, MinIO built from source."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from infra import install, maven
from infra.install import SetupError, _Installer, load_manifest, run_setup
from settings import Settings
from settings.layout import StateLayout
from tests.conftest import run_cli
from tests.jvm_versions import DEBEZIUM_VERSION, KAFKA_VERSION


def test_second_setup_does_nothing_and_says_so() -> None:
    result = run_cli("setup")
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr
    assert "ok: JVM artifacts of infra/jvm/pom.xml in place" in result.stderr


def test_installed_binaries_and_class_paths_match_the_manifests(settings: Settings) -> None:
    layout = StateLayout(settings.state_path, settings.tools_path)
    actions = run_setup(layout, lambda _msg: None)
    assert actions == 0
    assert (layout.bin / "minio").stat().st_mode & 0o111
    kafka = {p.name for p in layout.jvm_module("kafka").glob("*.jar")}
    assert {f"kafka_2.13-{KAFKA_VERSION}.jar", f"kafka-server-{KAFKA_VERSION}.jar",
            "slf4j-api-1.7.36.jar"} <= kafka
    assert any(name.startswith("log4j-slf4j-impl-") for name in kafka)  # the logging binding
    connect = {p.name for p in layout.jvm_module("connect").glob("*.jar")}
    assert {f"connect-runtime-{KAFKA_VERSION}.jar", f"connect-file-{KAFKA_VERSION}.jar"} <= connect
    assert not any("jetty9" in name or "-9.4." in name for name in connect)  # no Debian Jetty
    debezium = layout.jvm_module("connect-plugins") / "debezium-connector-postgres"
    assert (debezium / f"debezium-connector-postgres-{DEBEZIUM_VERSION}.jar").exists()
    assert list(debezium.glob("postgresql-*.jar")), "the plugin carries its JDBC driver"
    spark = {p.name for p in layout.jvm_module("spark").glob("*.jar")}
    assert any(name.startswith("delta-spark_4.1_2.13-") for name in spark)
    assert any(name.startswith("hadoop-aws-3.4.2") for name in spark)
    # pyspark ships these itself: a second copy would put two versions on the class path
    assert not any(name.startswith(("hadoop-client-", "scala-library-", "slf4j-api-"))
                   for name in spark)


@pytest.mark.stack  # runs Maven over every jar
def test_changed_pom_is_resolved_again(settings: Settings, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The install record holds the poms' fingerprint: after an edit of a pom, setup runs
    Maven again into a fresh folder, and jars of the old versions do not linger."""
    real = StateLayout(settings.state_path, settings.tools_path)
    jvm_copy = tmp_path / "jvm-manifest"
    shutil.copytree(maven.JVM_DIR, jvm_copy)
    layout = StateLayout(tmp_path / "state", tmp_path / "tools")
    layout.ensure()
    shutil.copytree(real.jvm, layout.jvm, copy_function=os.link)
    stale = layout.jvm_module("kafka") / "kafka_2.13-0.0.1.jar"
    stale.write_bytes(b"an old version")
    monkeypatch.setattr(maven, "JVM_DIR", jvm_copy)
    layout.install_record.write_text(json.dumps({"jvm": maven.manifest_fingerprint()}))
    with (jvm_copy / "kafka" / "pom.xml").open("a") as pom:
        pom.write("<!-- edited -->\n")
    messages: list[str] = []
    installer = _Installer(layout, messages.append)
    installer.jvm_artifacts()
    assert installer.actions == 1
    assert not stale.exists(), "a re-resolved folder must not keep jars of old versions"
    assert (layout.jvm_module("kafka") / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    assert any(m.startswith("installed: kafka: ") for m in messages), messages
    again = _Installer(layout, messages.append)
    again.jvm_artifacts()
    assert again.actions == 0


def test_setup_without_go_names_the_version_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MinIO, the embedded S3 server, exists only as source: without Go setup stops and
    says what to install, rather than leaving a stack that cannot start."""
    build = next(b for b in load_manifest()["go_builds"] if b["name"] == "minio")
    monkeypatch.setattr(install, "go_version", lambda: None)
    layout = StateLayout(tmp_path / "state", tmp_path / "tools")
    layout.ensure()
    with pytest.raises(SetupError, match=rf"needs Go >= {build['min_go']} on PATH "
                                         r"\(no `go` on PATH\)"):
        _Installer(layout, lambda _msg: None).go_build(build)
    assert not (layout.bin / "minio").exists()
