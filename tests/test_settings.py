"""Configuration: profiles, precedence (yaml < .env < environment), errors naming the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import ConfigError, load_settings

CONFIG = """
default_profile: base
profiles:
  base:
    state_dir: .state
    tools_dir: .state/tools
    kafka: {bootstrap_servers: "127.0.0.1:9092"}
    connect: {url: "http://127.0.0.1:8083"}
    s3: {endpoint: "http://127.0.0.1:9000", bucket: lake}
    postgres: {host: 127.0.0.1, port: 5432, database: db, user: me}
  child:
    extends: base
    kafka: {bootstrap_servers: "broker:29092"}
  loop_a: {extends: loop_b}
  loop_b: {extends: loop_a}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "lakehouse.yaml").write_text(CONFIG)
    return tmp_path


def test_default_profile_and_inheritance(project: Path) -> None:
    base = load_settings(environ={}, project_dir=project)
    assert base.profile == "base"
    assert base.kafka.first_server() == ("127.0.0.1", 9092)
    child = load_settings("child", environ={}, project_dir=project)
    assert child.kafka.bootstrap_servers == "broker:29092"
    assert child.s3.bucket == "lake"  # inherited
    assert child.state_path == (project / ".state").resolve()


def test_environment_beats_env_file_beats_yaml(project: Path) -> None:
    (project / ".env").write_text(
        "LAKEHOUSE_S3__BUCKET=from-dotenv\nLAKEHOUSE_POSTGRES__PORT=6000\n"
        "LAKEHOUSE_S3__SECRET_KEY=s3cret\n")
    settings = load_settings(environ={"LAKEHOUSE_POSTGRES__PORT": "7000"}, project_dir=project)
    assert settings.s3.bucket == "from-dotenv"
    assert settings.postgres.port == 7000
    assert settings.s3.secret_key is not None
    assert settings.s3.secret_key.get_secret_value() == "s3cret"
    assert "s3cret" not in settings.model_dump_json()


def test_a_spark_conf_from_the_environment_keeps_its_spelling(project: Path) -> None:
    """Section and field names are case-insensitive; Spark's conf names are not."""
    settings = load_settings(environ={
        "LAKEHOUSE_SPARK__CONF__spark.sql.adaptive.coalescePartitions.enabled": "false",
        "LAKEHOUSE_Spark__Shuffle_Partitions": "3"}, project_dir=project)
    assert settings.spark.conf == {"spark.sql.adaptive.coalescePartitions.enabled": "false"}
    assert settings.spark.shuffle_partitions == 3


def test_profile_chosen_by_environment(project: Path) -> None:
    settings = load_settings(environ={"LAKEHOUSE_PROFILE": "child"}, project_dir=project)
    assert settings.profile == "child"


def test_errors_name_the_variable_or_file_and_field(project: Path) -> None:
    with pytest.raises(ConfigError, match=r"LAKEHOUSE_POSTGRES__PORT: postgres.port"):
        load_settings(environ={"LAKEHOUSE_POSTGRES__PORT": "x"}, project_dir=project)
    with pytest.raises(ConfigError, match=r"LAKEHOUSE_KAFKA__TYPO: kafka.typo: Extra inputs"):
        load_settings(environ={"LAKEHOUSE_KAFKA__TYPO": "1"}, project_dir=project)
    (project / "lakehouse.yaml").write_text(CONFIG.replace("port: 5432", "port: 99999"))
    with pytest.raises(ConfigError, match=r"lakehouse.yaml \[profile base\]: postgres.port"):
        load_settings(environ={}, project_dir=project)


def test_unknown_profile_and_extends_loop(project: Path) -> None:
    with pytest.raises(ConfigError, match="no profile 'nope'"):
        load_settings("nope", environ={}, project_dir=project)
    with pytest.raises(ConfigError, match="loops"):
        load_settings("loop_a", environ={}, project_dir=project)


def test_missing_secret_is_reported_with_the_variable(project: Path) -> None:
    settings = load_settings(environ={}, project_dir=project)
    with pytest.raises(ValueError, match="LAKEHOUSE_S3__ACCESS_KEY"):
        settings.s3.credentials()
    with pytest.raises(ValueError, match="LAKEHOUSE_POSTGRES__PASSWORD"):
        settings.postgres.dsn_kwargs()


def test_project_config_profiles_all_load() -> None:
    for profile in ("embedded", "test", "external", "replicated", "cluster", "compose"):
        settings = load_settings(profile)
        assert settings.profile == profile
    assert not load_settings("external").embedded.enabled
    assert not load_settings("compose").embedded.enabled


def test_cluster_profile_ports_and_a_master_for_its_workers(project: Path) -> None:
    """The cluster's Spark daemons take one block from spark.master's port, clear of the
    embedded profile's ports; workers without a standalone master are refused."""
    cluster = load_settings("cluster", environ={})
    ports = [p for d in cluster.spark_daemons() for p in (d.port, d.ui_port)]
    assert ports == list(range(17070, 17076))
    assert cluster.spark.on_loopback and cluster.kafka.replication_factor == 3
    embedded = load_settings("embedded", environ={})
    assert not embedded.spark_daemons()
    taken = {embedded.kafka.first_server()[1], embedded.connect.host_port()[1],
             embedded.s3.host_port()[1], embedded.postgres.port}
    assert not taken & ({n.port for n in cluster.kafka_nodes()} | set(ports))
    with pytest.raises(ConfigError, match=r"spark.master is 'local\[2\]': with embedded."
                                          r"spark_workers it must be spark://127.0.0.1:<port>"):
        load_settings(environ={"LAKEHOUSE_EMBEDDED__SPARK_WORKERS": "2"}, project_dir=project)


def test_jars_reach_executors_in_place_only_on_this_machine() -> None:
    """Local drivers and the stack's own workers read the jars where setup put them; the
    compose profile's workers (containers the project does not start) fetch them."""
    assert load_settings("embedded", environ={}).jars_in_place
    assert load_settings("cluster", environ={}).jars_in_place
    assert not load_settings("compose", environ={}).jars_in_place
    assert not load_settings("external", environ={
        "LAKEHOUSE_SPARK__MASTER": "spark://spark.example:7077"}).jars_in_place


def test_env_file_gains_new_variables_and_keeps_the_old_values(tmp_path: Path) -> None:
    """A checkout whose .env.example gained a secret: setup adds it to the existing .env with
    a generated value, keeps every value already there, and a second run changes nothing."""
    from settings.env_file import PLACEHOLDER, ensure_env_file

    (tmp_path / ".env.example").write_text(
        f"# comment\nA_KEY=fixed\nA_SECRET={PLACEHOLDER}\n# B_OPTIONAL=x\n")
    assert ensure_env_file(tmp_path)
    first = (tmp_path / ".env").read_text()
    secret = dict(line.split("=", 1) for line in first.splitlines()
                  if line and not line.startswith("#"))["A_SECRET"]
    assert secret != PLACEHOLDER and len(secret) >= 20
    assert (tmp_path / ".env").stat().st_mode & 0o077 == 0

    (tmp_path / ".env").write_text(first.replace("A_KEY=fixed", "A_KEY=mine"))
    (tmp_path / ".env.example").write_text(
        (tmp_path / ".env.example").read_text() + f"NEW_SECRET={PLACEHOLDER}\n")
    assert ensure_env_file(tmp_path)
    values = dict(line.split("=", 1) for line in (tmp_path / ".env").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert values["A_KEY"] == "mine" and values["A_SECRET"] == secret
    assert values["NEW_SECRET"] not in ("", PLACEHOLDER)
    assert "B_OPTIONAL" not in values
    assert not ensure_env_file(tmp_path)


def test_silver_triggers_midway_between_two_of_bronzes(project: Path) -> None:
    """Spark starts processing-time batches at multiples of their interval: silver on half
    of bronze's has a trigger midway between two of bronze's, after bronze's commit."""
    from cli.trigger_interval import TriggerInterval

    settings = load_settings(environ={}, project_dir=project)
    assert settings.ingest.trigger_interval_seconds == 10
    assert settings.ingest.bronze_trigger == "10000 milliseconds"
    assert settings.ingest.silver_trigger == "5000 milliseconds"
    quick = load_settings(environ={"LAKEHOUSE_INGEST__TRIGGER_INTERVAL_SECONDS": "3"},
                          project_dir=project)
    assert (quick.ingest.bronze_trigger, quick.ingest.silver_trigger) == (
        "3000 milliseconds", "1500 milliseconds")
    parse = TriggerInterval().convert
    assert [parse(text, None, None) for text in ("2 seconds", "1 second", "500 ms", "2",
                                                 "1.5 min")] == [2.0, 1.0, 0.5, 2.0, 90.0]
