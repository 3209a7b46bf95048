"""infra/docker-compose.yml is the `cluster` topology of lakehouse.yaml, as the `compose`
profile names it: the same component names, ports, listener layout, server settings and
sizes as the components `lakehouse --profile cluster up` starts, and Spark workers with
the Python the driver names.

Docker is not needed: the compose file is read as YAML and compared with the settings and
with the configuration files the embedded components render (into a temporary folder).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dotenv import dotenv_values

from connectors.connect_config import CONNECTORS_DIR, worker_provider_properties
from infra.components.kafka import Kafka, node_name
from infra.components.kafka_connect import KafkaConnect
from infra.components.spark_cluster import MASTER_CLASS, WORKER_CLASS, spark_cluster
from infra.stack import Stack
from settings import Settings, load_settings
from settings.layout import StateLayout
from spark_streaming.spark_conf import _executor_pythonpath, executor_python

PROJECT_DIR = Path(__file__).resolve().parents[1]
COMPOSE_FILE = PROJECT_DIR / "infra" / "docker-compose.yml"
SPARK_DOCKERFILE = PROJECT_DIR / "infra" / "spark" / "Dockerfile"
ENV_EXAMPLE = PROJECT_DIR / ".env.example"
# Not components of the profile: a one-shot job.
HELPERS = {"minio-init"}
# Compose interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, ... or $VAR; `$$` is a literal $.
VARIABLE = re.compile(r"(?<!\$)\$(?:\{(?P<braced>\w+)(?P<modifier>[^}]*)\}|(?P<bare>[A-Za-z_]\w*))")
SECRET_REFERENCE = re.compile(r"\$\{LAKEHOUSE_\w+:\?[^}]+\}")
SECRET_KEY_NAMES = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|ROOT_USER")
# Where the containers mount the project: the host's path, from .env.
PROJECT_VARIABLE = "LAKEHOUSE_PROJECT_DIR"
SOME_PROJECT_DIR = "/srv/lakehouse"
# Template keys compose cannot share: its own data folder, and the quorum, which the image
# formats from a static voters list instead of the embedded nodes' dynamic one.
KAFKA_OWN_KEYS = {"log.dirs", "controller.quorum.bootstrap.servers"}
# The worker's plugin folder is a container path; basic auth is the embedded worker's own;
# the drop folder is the profile's (checked against the compose profile below).
CONNECT_OWN_KEYS = {"plugin.path", "lakehouse.connect.file.dirs"}
CONNECT_MAIN_KEYS = {"bootstrap.servers": "BOOTSTRAP_SERVERS", "group.id": "GROUP_ID",
                     "config.storage.topic": "CONFIG_STORAGE_TOPIC",
                     "offset.storage.topic": "OFFSET_STORAGE_TOPIC",
                     "status.storage.topic": "STATUS_STORAGE_TOPIC"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def profile(name: str, tmp_path_factory: pytest.TempPathFactory,
            **environ: str) -> Settings:
    """A profile as lakehouse.yaml states it (no .env, no other LAKEHOUSE_* overrides), its
    project folder LAKEHOUSE_PROJECT_DIR when given (a folder without .env), else a fresh one."""
    return load_settings(
        name,
        environ={"LAKEHOUSE_CONFIG": str(PROJECT_DIR / "lakehouse.yaml"), **environ},
        project_dir=None if PROJECT_VARIABLE in environ else tmp_path_factory.mktemp("no-env"),
    )


# The Kafka passwords both sides get: compose from .env, the rendered files from settings.
KAFKA_PASSWORDS = {f"LAKEHOUSE_KAFKA__{role.upper()}_PASSWORD": f"{role}-secret"
                   for role in ("broker", "operator", "scrapers", "connect", "spark")}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The `compose` profile: what the CLI uses against this compose file."""
    return profile("compose", tmp_path_factory, **KAFKA_PASSWORDS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The `cluster` profile, whose embedded components render the server files."""
    return profile("cluster", tmp_path_factory, **KAFKA_PASSWORDS)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> StateLayout:
    root = tmp_path_factory.mktemp("state")
    return StateLayout(root, root / "tools")


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as strings, whether written as a mapping or a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def with_passwords(env: dict[str, str]) -> dict[str, str]:
    """The Kafka logins' values as compose gives them to the container (.env's passwords
    interpolated; other variables left as written)."""
    def value(text: str) -> str:
        return VARIABLE.sub(lambda m: KAFKA_PASSWORDS.get(m["braced"] or "", m[0]), text)
    return {key: value(text) for key, text in env.items()}


def properties(path: Path) -> dict[str, str]:
    """A Java properties file as written by the templates (key=value, # comments)."""
    result = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            result[key.strip()] = value.strip()
    return result


def env_name(prefix: str, key: str) -> str:
    """A property as the image's environment names it: a.b -> PREFIX_A_B, a_b -> A__B,
    a-b -> A___B."""
    return prefix + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def tokens(command: str | list[str] | None) -> list[str]:
    return command.split() if isinstance(command, str) else [str(t) for t in command or []]


def strings(node: Any) -> list[str]:
    """Every string value in a parsed YAML tree (comments are already gone)."""
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return [node] if isinstance(node, str) else []


def interpolate(text: str, values: dict[str, str]) -> str:
    """Compose's interpolation of `text` with `values` (enough for ${VAR...} and $$)."""
    def value(match: re.Match[str]) -> str:
        name = match["braced"] or match["bare"]
        if name not in values:
            raise AssertionError(f"{text!r} needs {name}")
        return values[name]
    return VARIABLE.sub(value, text).replace("$$", "$")


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read-only) of every bind mount a service declares."""
    result = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                result.append((volume["source"], volume["target"],
                               bool(volume.get("read_only"))))
            continue
        source, target, *options = str(volume).split(":")
        if source.startswith((".", "/", "$")):
            result.append((source, target, "ro" in options))
    return result


def kafka_services(settings: Settings) -> list[tuple[int, str]]:
    return [(node.node_id, node_name(node.node_id)) for node in settings.kafka_nodes()]


def test_services_are_the_profiles_components(compose: dict[str, Any],
                                              settings: Settings, layout: StateLayout) -> None:
    """Every server `lakehouse --profile cluster up` would start, by its name, and nothing
    else but one-shot helpers."""
    wanted = {c.name for c in Stack(settings).components if c.wanted()}
    assert {"kafka", "kafka-2", "kafka-3", "spark-worker-2"} <= wanted  # the profile's shape
    services = set(compose.get("services") or {})
    assert services - HELPERS == wanted, (
        f"{COMPOSE_FILE.name}: missing {sorted(wanted - services)}, not components of the "
        f"profile: {sorted(services - HELPERS - wanted)}")


def test_compose_profile_is_the_cluster_profile_started_by_compose(
        settings: Settings, cluster: Settings) -> None:
    """Same addresses, names and sizes as `cluster`; only who starts the servers, the state
    folder and the executors' interpreter differ."""
    assert not settings.embedded.enabled and cluster.embedded.enabled
    assert settings.state_dir != cluster.state_dir
    same = ("kafka", "connect", "s3", "postgres")
    for section in same:
        assert getattr(settings, section) == getattr(cluster, section), section
    assert settings.embedded.model_dump(exclude={"enabled"}) == \
        cluster.embedded.model_dump(exclude={"enabled"})
    assert settings.spark.master == cluster.spark.master
    # the stack's own workers run the driver's interpreter; compose's the image's
    assert executor_python(cluster) == sys.executable != executor_python(settings)


def test_every_service_binds_loopback_on_the_host_network(compose: dict[str, Any]) -> None:
    """Host network: every address is the profile's (127.0.0.1:<port>); nothing published,
    as published ports would be a second, different address."""
    for name, service in compose["services"].items():
        assert service.get("network_mode") == "host", f"{name}: not on the host network"
        assert not service.get("ports"), f"{name}: publishes {service['ports']}"


def test_three_kafka_nodes_as_the_embedded_cluster(compose: dict[str, Any], cluster: Settings,
                                                   layout: StateLayout) -> None:
    """Each node has the embedded node's id, ports and listener layout and every setting of
    infra/templates/kafka-server.properties as the cluster profile renders it; all are
    voters of one quorum."""
    services = compose["services"]
    nodes = cluster.kafka_nodes()
    assert len(nodes) == 3
    voters = ",".join(f"{n.node_id}@{n.controller_address}" for n in nodes)
    cluster_ids = set()
    for node in nodes:
        name = node_name(node.node_id)
        component = Kafka(cluster, layout, node.node_id)
        component.write_config()
        rendered = properties(component.config_file)
        assert rendered["controller.quorum.bootstrap.servers"] == ",".join(
            n.controller_address for n in nodes)
        env = with_passwords(environment(services[name]))
        expected = {env_name("KAFKA_", key): value for key, value in rendered.items()
                    if key not in KAFKA_OWN_KEYS}
        expected["KAFKA_CONTROLLER_QUORUM_VOTERS"] = voters
        wrong = {key: (env.get(key), value) for key, value in expected.items()
                 if env.get(key) != value}
        assert not wrong, f"{name}: (compose, embedded node) differ: {wrong}"
        assert f"-Xmx{cluster.embedded.kafka_heap}" in env.get("KAFKA_HEAP_OPTS", "").split()
        assert node.address in " ".join(tokens(services[name]["healthcheck"]["test"])), (
            f"{name}: its health check does not ask {node.address}")
        cluster_ids.add(env.get("CLUSTER_ID"))
    assert len(cluster_ids) == 1 and None not in cluster_ids, cluster_ids
    ids = [environment(services[name])["KAFKA_NODE_ID"] for _, name in kafka_services(cluster)]
    assert len(set(ids)) == 3, f"node ids {ids}"


def test_kafka_replication_is_the_profiles(compose: dict[str, Any], settings: Settings) -> None:
    """Topics created without a factor and the internal topics get the profile's
    kafka.replication_factor, with kafka.min_insync_replicas copies in sync."""
    factor, isr = settings.kafka.replication_factor, settings.kafka.min_insync_replicas
    assert (factor, isr) == (3, 2)
    for _, name in kafka_services(settings):
        env = environment(compose["services"][name])
        for key in ("DEFAULT_REPLICATION_FACTOR", "OFFSETS_TOPIC_REPLICATION_FACTOR",
                    "TRANSACTION_STATE_LOG_REPLICATION_FACTOR"):
            assert env.get("KAFKA_" + key) == str(factor), (name, key)
        for key in ("MIN_INSYNC_REPLICAS", "TRANSACTION_STATE_LOG_MIN_ISR"):
            assert env.get("KAFKA_" + key) == str(isr), (name, key)


def test_kafka_nodes_keep_their_own_data(compose: dict[str, Any], settings: Settings) -> None:
    declared = set(compose.get("volumes") or {})
    volumes = []
    for _, name in kafka_services(settings):
        service = compose["services"][name]
        data = environment(service)["KAFKA_LOG_DIRS"]
        named = [str(v).split(":")[0] for v in service.get("volumes") or []
                 if str(v).split(":")[1:2] == [data]]
        assert len(named) == 1 and named[0] in declared, f"{name}: no volume on {data}"
        volumes += named
    assert len(set(volumes)) == len(volumes), f"nodes share data volumes: {volumes}"


def test_connect_worker_as_the_embedded_worker(compose: dict[str, Any], cluster: Settings,
                                               layout: StateLayout) -> None:
    """Every setting of infra/templates/connect-worker.properties as the cluster profile
    renders it (no REST password here), bootstrap from all three nodes, its config
    providers restricted to what the connector files reference."""
    component = KafkaConnect(cluster, layout)
    component.prepare()
    rendered = properties(component.worker_file)
    assert rendered["bootstrap.servers"] == ",".join(n.address for n in cluster.kafka_nodes())
    service = compose["services"]["kafka-connect"]
    env = with_passwords(environment(service))
    expected = {CONNECT_MAIN_KEYS.get(key) or env_name("CONNECT_", key): value
                for key, value in rendered.items() if key not in CONNECT_OWN_KEYS}
    for key, value in worker_provider_properties(CONNECTORS_DIR).items():
        assert expected.get(env_name("CONNECT_", key)) == value, key
    wrong = {key: (env.get(key), value) for key, value in expected.items()
             if env.get(key) != value}
    assert not wrong, f"kafka-connect: (compose, embedded worker) differ: {wrong}"
    providers = {key for key in env if key.startswith("CONNECT_CONFIG_PROVIDERS")}
    assert providers == {key for key in expected if key.startswith("CONNECT_CONFIG_PROVIDERS")}
    depends = set(service.get("depends_on") or {})
    assert {name for _, name in kafka_services(cluster)} <= depends, depends
    assert f"-Xmx{cluster.embedded.connect_heap}" in env.get("KAFKA_HEAP_OPTS", "").split()
    assert "LAKEHOUSE_POSTGRES__CDC_PASSWORD" in env, (
        "kafka-connect needs LAKEHOUSE_POSTGRES__CDC_PASSWORD for ${env:...} in connector "
        "configs")
    assert "LAKEHOUSE_POSTGRES__PASSWORD" not in env, (
        "kafka-connect gets the administrator's password; Debezium logs in as postgres.cdc_user")
    host, port = cluster.connect.host_port()
    assert f"http://{host}:{port}/" in " ".join(tokens(service["healthcheck"]["test"]))


def test_connect_reads_the_state_folder_at_the_drivers_path(
        compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """The trips file source reads ${lakehouse:state_dir}/drops/...: the profile's state
    folder, read-only, at the host's path; the project (with .env) is not mounted."""
    settings = profile("compose", tmp_path_factory, **{PROJECT_VARIABLE: SOME_PROJECT_DIR})
    found = [(source, interpolate(target, {PROJECT_VARIABLE: SOME_PROJECT_DIR}), ro)
             for source, target, ro in mounts(compose["services"]["kafka-connect"])]
    state = str(settings.state_path)
    assert state == f"{SOME_PROJECT_DIR}/{settings.state_dir}"
    relative = f"../{settings.state_dir}"  # compose resolves sources from infra/
    assert (relative, state, True) in found, f"kafka-connect mounts {found}; expected " \
        f"{relative} at {state}, read-only"
    assert not [m for m in found if m[0] == ".."], "kafka-connect mounts the project (.env)"
    # the connector guard lets connectors use the compose profile's drop folder, and is on
    # the image's class path
    file_dirs = environment(compose["services"]["kafka-connect"])[
        "CONNECT_LAKEHOUSE_CONNECT_FILE_DIRS"]
    assert interpolate(file_dirs, {PROJECT_VARIABLE: SOME_PROJECT_DIR}) == \
        str(settings.connect_file_path)
    guard = "../.state/tools/jvm/connect/lakehouse-connect-guard.jar"
    assert (guard, "/opt/kafka/libs/lakehouse-connect-guard.jar", True) in found, found


def test_minio_serves_the_configured_endpoint_and_bucket(
    compose: dict[str, Any], settings: Settings
) -> None:
    host, port = settings.s3.host_port()
    minio = compose["services"]["minio"]
    args = tokens(minio["command"])
    assert args[args.index("--address") + 1] == f"{host}:{port}", args
    assert "--console-address" not in args
    env = environment(minio)
    assert env.get("MINIO_BROWSER") == "off"
    assert env.get("MINIO_SITE_REGION") == settings.s3.region
    assert any(value == settings.s3.endpoint for key, value in env.items()
               if key.startswith("MC_HOST_")), "minio's health check asks another address"
    script = " ".join(tokens(compose["services"]["minio-init"].get("command")))
    assert f"mc alias set lakehouse-minio {settings.s3.endpoint} " in script, script
    buckets = re.findall(r"\bmc mb\b(?:\s+-{1,2}[\w-]+)*\s+[\w.-]+/([\w.-]+)", script)
    assert buckets == [settings.s3.bucket], (
        f"minio-init creates buckets {buckets}, expected [{settings.s3.bucket!r}] (s3.bucket)"
    )
    assert "--ignore-existing" in script, "minio-init must be idempotent (mc mb --ignore-existing)"


def test_postgres_is_the_configured_server_ready_for_cdc(
        compose: dict[str, Any], settings: Settings) -> None:
    service = compose["services"]["postgres"]
    args = tokens(service.get("command"))
    given = {args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-c"}
    expected = {f"listen_addresses={settings.postgres.host}",
                f"port={settings.postgres.port}", "wal_level=logical"}
    assert expected <= given, f"postgres command {args} lacks {sorted(expected - given)}"
    env = environment(service)
    found = (env.get("POSTGRES_USER"), env.get("POSTGRES_DB"))
    wanted = (settings.postgres.user, settings.postgres.database)
    assert found == wanted, (
        f"POSTGRES_USER/POSTGRES_DB are {found}, postgres.user/database are {wanted}")
    check = " ".join(tokens(service["healthcheck"]["test"]))
    assert f"-h {settings.postgres.host} -p {settings.postgres.port}" in check, check


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


def test_spark_cluster_matches_the_cluster_profile(
    compose: dict[str, Any], settings: Settings, layout: StateLayout
) -> None:
    """Spark's master and workers: the profile's component names, its port layout (from
    spark.master's port), worker sizes, loopback, the daemons' environment, no REST
    submission port."""
    services = compose["services"]
    components = spark_cluster(settings, layout)
    names = [c.name for c in components]
    assert len(names) == 3 and {n for n in services if n.startswith("spark-")} == set(names)
    for component in components:
        service = services[component.name]
        args = tokens(service["command"])
        main = MASTER_CLASS if component.name == "spark-master" else WORKER_CLASS
        assert main in args, f"{component.name} runs {args}, expected {main}"
        expected = component.arguments()[:6]  # --host, --port, --webui-port
        assert args[args.index("--host"):args.index("--host") + 6] == expected, (
            f"{component.name}: {args}, the cluster profile's component: {expected}")
        if main == WORKER_CLASS:
            assert args[-1] == settings.spark.master, args
            for option, value in (("--cores", str(settings.embedded.spark_worker_cores)),
                                  ("--memory", settings.embedded.spark_worker_memory)):
                assert args[args.index(option) + 1] == value, (component.name, option)
        env = environment(service)
        own = component.environment()
        for key in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_DAEMON_MEMORY",
                    "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS"):
            assert env.get(key) == own.get(key), (component.name, key, env.get(key), own.get(key))
    master_ui = settings.spark_daemons()[0].ui_port
    check = " ".join(tokens(services["spark-master"]["healthcheck"]["test"]))
    assert f"http://127.0.0.1:{master_ui}/json/" in check, check


def dockerfile() -> tuple[list[str], str]:
    """The base images (FROM) and the whole text of infra/spark/Dockerfile."""
    text = SPARK_DOCKERFILE.read_text()
    return re.findall(r"^FROM\s+(\S+)", text, flags=re.M), text


def test_spark_services_run_the_image_with_the_drivers_python(
        compose: dict[str, Any], settings: Settings) -> None:
    """The master and workers run the image of infra/spark/Dockerfile: the Python minor
    version of the driver (this one), requirements.lock installed into the virtualenv whose
    interpreter the profile names for the executors, Spark of pyspark's minor version."""
    import pyspark

    python = executor_python(settings)
    assert python != sys.executable and python.startswith("/opt/"), (
        f"the compose profile's executors would run {python}, a path of this machine")
    images, text = dockerfile()
    venv = str(Path(python).parents[1])
    assert re.search(rf"python -m venv {re.escape(venv)}\b", text), (
        f"{SPARK_DOCKERFILE.name} makes no virtualenv at {venv} (spark.pyspark.python)")
    assert re.search(rf"{re.escape(venv)}/bin/pip install .*-r \S*requirements\.lock", text)
    assert "COPY requirements.lock" in text
    python_image = [image for image in images if image.startswith("python:")]
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert len(python_image) == 1 and python_image[0].startswith(f"python:{minor}."), (
        f"{SPARK_DOCKERFILE.name} bases on {images}; the driver runs Python {minor}")
    spark_image = [image for image in images if image.startswith("apache/spark:")]
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert len(spark_image) == 1 and spark_image[0].startswith(f"apache/spark:{spark_minor}."), (
        f"{SPARK_DOCKERFILE.name} takes Spark from {spark_image}; pyspark is {pyspark.__version__}")
    for image in images:  # pinned: a version, never latest
        assert re.search(r":\d+\.\d+\.\d+", image), f"{image} is not pinned to a release"
    for name in ("spark-master", "spark-worker-1", "spark-worker-2"):
        build = compose["services"][name].get("build") or {}
        dockerfile_path = (COMPOSE_FILE.parent / build.get("context", ".")
                           / build.get("dockerfile", "Dockerfile")).resolve()
        assert dockerfile_path == SPARK_DOCKERFILE, f"{name} builds {dockerfile_path}"
    ignore = (SPARK_DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert ignore[-2:] == ["*", "!requirements.lock"], "the build context would send the project"


def test_workers_import_the_project_at_the_drivers_path(
        compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """The executors' PYTHONPATH is the driver's project folder: each worker mounts the
    project there (LAKEHOUSE_PROJECT_DIR, the loader's own name for it), read-only."""
    settings = profile("compose", tmp_path_factory, **{PROJECT_VARIABLE: SOME_PROJECT_DIR})
    path = _executor_pythonpath(settings)["spark.executorEnv.PYTHONPATH"]
    assert path == SOME_PROJECT_DIR
    for component in spark_cluster(settings, StateLayout(Path("state"), Path("tools")))[1:]:
        found = [(source, interpolate(target, {PROJECT_VARIABLE: SOME_PROJECT_DIR}), ro)
                 for source, target, ro in mounts(compose["services"][component.name])]
        assert ("..", path, True) in found, (
            f"{component.name} mounts {found}; expected the project (..) at {path}, read-only")


def test_external_profile_is_left_for_own_servers(tmp_path_factory: pytest.TempPathFactory,
                                                  settings: Settings) -> None:
    """`external` keeps its usual ports and local Spark; compose is not its stack."""
    external = profile("external", tmp_path_factory)
    assert not external.embedded.enabled
    assert external.kafka.first_server() != settings.kafka.first_server()
    assert external.spark.master.startswith("local")
