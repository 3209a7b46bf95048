"""infra/docker-compose.yml agrees with the `external` profile of lakehouse.yaml.

Docker is not needed: the compose file is read as YAML and compared with the settings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from dotenv import dotenv_values

from connectors.connect_config import CONNECTORS_DIR, worker_provider_properties
from infra.components.spark_cluster import MASTER_CLASS, WORKER_CLASS, spark_cluster
from infra.layout import StateLayout
from settings import Settings, load_settings

PROJECT_DIR = Path(__file__).resolve().parents[1]
COMPOSE_FILE = PROJECT_DIR / "infra" / "docker-compose.yml"
ENV_EXAMPLE = PROJECT_DIR / ".env.example"
SERVICES = {"kafka", "kafka-connect", "minio", "minio-init", "postgres", "spark-master",
            "spark-worker-1", "spark-worker-2"}
# Compose interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, ... or $VAR; `$$` is a literal $.
VARIABLE = re.compile(r"(?<!\$)\$(?:\{(?P<braced>\w+)(?P<modifier>[^}]*)\}|(?P<bare>[A-Za-z_]\w*))")
SECRET_REFERENCE = re.compile(r"\$\{LAKEHOUSE_\w+:\?[^}]+\}")
SECRET_KEY_NAMES = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|ROOT_USER")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The external profile as lakehouse.yaml states it (no .env, no LAKEHOUSE_* overrides)."""
    return load_settings(
        "external",
        environ={"LAKEHOUSE_CONFIG": str(PROJECT_DIR / "lakehouse.yaml")},
        project_dir=tmp_path_factory.mktemp("no-env"),
    )


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as strings, whether written as a mapping or a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def published_ports(service: dict[str, Any]) -> list[tuple[str | None, int]]:
    """(host ip, host port) of every port a service publishes."""
    result = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            result.append((port.get("host_ip"), int(port["published"])))
            continue
        parts = str(port).split("/")[0].split(":")
        ip = parts[0] if len(parts) == 3 else None
        result.append((ip, int(parts[-2]) if len(parts) >= 2 else int(parts[-1])))
    return result


def tokens(command: str | list[str] | None) -> list[str]:
    return command.split() if isinstance(command, str) else [str(t) for t in command or []]


def strings(node: Any) -> list[str]:
    """Every string value in a parsed YAML tree (comments are already gone)."""
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return [node] if isinstance(node, str) else []


def test_services_exist(compose: dict[str, Any]) -> None:
    missing = SERVICES - set(compose.get("services") or {})
    assert not missing, f"{COMPOSE_FILE.name}: services missing: {sorted(missing)}"


def test_published_ports_match_external_profile(
    compose: dict[str, Any], external: Settings
) -> None:
    services = compose["services"]
    expected = {
        "kafka": external.kafka.first_server()[1],
        "kafka-connect": external.connect.host_port()[1],
        "minio": external.s3.host_port()[1],
        "postgres": external.postgres.port,
    }
    for name, port in expected.items():
        host_ports = [p for _, p in published_ports(services[name])]
        assert port in host_ports, (
            f"service {name} publishes host ports {host_ports}, but lakehouse.yaml "
            f"[external] expects {port}"
        )
    for name, service in services.items():
        for ip, port in published_ports(service):
            assert ip == "127.0.0.1", (
                f"service {name} publishes port {port} on {ip or 'all interfaces'}; "
                "bind it to 127.0.0.1"
            )


def test_kafka_advertises_the_bootstrap_address(
    compose: dict[str, Any], external: Settings
) -> None:
    host, port = external.kafka.first_server()
    advertised = environment(compose["services"]["kafka"]).get("KAFKA_ADVERTISED_LISTENERS", "")
    assert f"://{host}:{port}" in advertised, (
        f"kafka advertises {advertised!r}; host clients use {host}:{port} "
        "(kafka.bootstrap_servers of the external profile)"
    )


def test_minio_init_creates_the_configured_bucket(
    compose: dict[str, Any], external: Settings
) -> None:
    script = " ".join(tokens(compose["services"]["minio-init"].get("command")))
    buckets = re.findall(r"\bmc mb\b(?:\s+-{1,2}[\w-]+)*\s+[\w.-]+/([\w.-]+)", script)
    assert buckets == [external.s3.bucket], (
        f"minio-init creates buckets {buckets}, expected [{external.s3.bucket!r}] (s3.bucket)"
    )
    assert "--ignore-existing" in script, "minio-init must be idempotent (mc mb --ignore-existing)"
    region = environment(compose["services"]["minio"]).get("MINIO_SITE_REGION")
    assert region in (None, external.s3.region), (
        f"minio MINIO_SITE_REGION is {region!r}, s3.region is {external.s3.region!r}"
    )


def test_connect_worker_matches_config(compose: dict[str, Any], external: Settings) -> None:
    env = environment(compose["services"]["kafka-connect"])
    prefix = external.connect.internal_topic_prefix
    expected = {
        "GROUP_ID": external.connect.group_id,
        "CONFIG_STORAGE_TOPIC": f"{prefix}configs",
        "OFFSET_STORAGE_TOPIC": f"{prefix}offsets",
        "STATUS_STORAGE_TOPIC": f"{prefix}status",
    }
    # Config providers as the embedded worker gets them: restricted to what the connector
    # files reference (CONNECT_A_B <-> a.b).
    for key, value in worker_provider_properties(CONNECTORS_DIR).items():
        expected["CONNECT_" + key.upper().replace(".", "_")] = value
    providers = {key for key in env if key.startswith("CONNECT_CONFIG_PROVIDERS")}
    assert providers == {key for key in expected if key.startswith("CONNECT_CONFIG_")}, (
        f"kafka-connect sets config provider variables {sorted(providers)}, the embedded "
        f"worker {sorted(expected)}"
    )
    wrong = {key: env.get(key) for key, value in expected.items() if env.get(key) != value}
    assert not wrong, (
        f"kafka-connect environment differs from the config: {wrong}, expected {expected}"
    )
    assert "LAKEHOUSE_POSTGRES__CDC_PASSWORD" in env, (
        "kafka-connect needs LAKEHOUSE_POSTGRES__CDC_PASSWORD for ${env:...} in connector "
        "configs"
    )
    assert "LAKEHOUSE_POSTGRES__PASSWORD" not in env, (
        "kafka-connect gets the administrator's password; Debezium logs in as postgres.cdc_user"
    )


def test_variables_are_documented_or_defaulted(compose: dict[str, Any]) -> None:
    documented = {key for key in dotenv_values(ENV_EXAMPLE) if key.startswith("LAKEHOUSE_")}
    undocumented = set()
    for text in strings(compose):
        for match in VARIABLE.finditer(text):
            name = match["braced"] or match["bare"]
            has_default = (match["modifier"] or "").startswith((":-", "-"))
            if name not in documented and not has_default:
                undocumented.add(name)
    assert not undocumented, (
        f"{COMPOSE_FILE.name} uses variables {sorted(undocumented)} that are neither in "
        f"{ENV_EXAMPLE.name} ({sorted(documented)}) nor given a default; "
        "write $$ for a literal $"
    )


def test_no_literal_secrets(compose: dict[str, Any]) -> None:
    services = compose["services"]
    required = {("minio", "MINIO_ROOT_PASSWORD"), ("postgres", "POSTGRES_PASSWORD")}
    for name, key in required:
        assert key in environment(services[name]), f"service {name} sets no {key}"
    literal = {
        f"{name}.{key}": value
        for name, service in services.items()
        for key, value in environment(service).items()
        if SECRET_KEY_NAMES.search(key) and not SECRET_REFERENCE.fullmatch(value)
    }
    assert not literal, (
        "secrets must be ${LAKEHOUSE_...:?message} references to the environment, found: "
        + ", ".join(sorted(literal))
    )


def test_postgres_is_ready_for_cdc(compose: dict[str, Any], external: Settings) -> None:
    service = compose["services"]["postgres"]
    args = tokens(service.get("command"))
    settings_given = {args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-c"}
    assert "wal_level=logical" in settings_given, (
        f"postgres command {args} lacks `-c wal_level=logical` (Debezium needs logical decoding)"
    )
    env = environment(service)
    found = (env.get("POSTGRES_USER"), env.get("POSTGRES_DB"))
    expected = (external.postgres.user, external.postgres.database)
    assert found == expected, (
        f"postgres POSTGRES_USER/POSTGRES_DB are {found}, postgres.user/database are {expected}"
    )


def test_spark_cluster_matches_the_cluster_profile(
    compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Spark's master and workers: the cluster profile's component names, its port layout
    (from spark.master's port), worker sizes, loopback binding, no REST submission port."""
    services = compose["services"]
    master_args = tokens(services["spark-master"]["command"])
    port = int(master_args[master_args.index("--port") + 1])
    cluster = load_settings(
        "cluster",
        environ={"LAKEHOUSE_CONFIG": str(PROJECT_DIR / "lakehouse.yaml"),
                 "LAKEHOUSE_SPARK__MASTER": f"spark://127.0.0.1:{port}"},
        project_dir=tmp_path_factory.mktemp("no-env"),
    )
    components = spark_cluster(cluster, StateLayout(Path("state"), Path("tools")))
    names = [c.name for c in components]
    assert {n for n in services if n.startswith("spark-")} == set(names)
    for component in components:
        service = services[component.name]
        args = tokens(service["command"])
        main = MASTER_CLASS if component.name == "spark-master" else WORKER_CLASS
        assert main in args, f"{component.name} runs {args}, expected {main}"
        expected = component.arguments()[:6]  # --host, --port, --webui-port
        assert args[args.index("--host"):args.index("--host") + 6] == expected, (
            f"{component.name}: {args}, the cluster profile's component: {expected}")
        if main == WORKER_CLASS:
            assert args[-1] == cluster.spark.master, args
            for option, value in (("--cores", str(cluster.embedded.spark_worker_cores)),
                                  ("--memory", cluster.embedded.spark_worker_memory)):
                assert args[args.index(option) + 1] == value, (component.name, option)
        env = environment(service)
        assert env.get("SPARK_LOCAL_IP") == "127.0.0.1", component.name
        assert service.get("network_mode") == "host" and not service.get("ports"), (
            f"{component.name}: host network, nothing published (it binds 127.0.0.1)")
    master_env = environment(services["spark-master"])
    assert master_env.get("SPARK_MASTER_OPTS") == \
        components[0].environment()["SPARK_MASTER_OPTS"]
