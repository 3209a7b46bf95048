"""Typed shape of the project configuration; unknown keys are errors so typos surface early."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    """Split `host:port` or a URL into its host and port."""
    parts = urlsplit(address if "//" in address else f"//{address}")
    if not parts.hostname:
        raise ValueError(f"no host in {address!r}")
    return parts.hostname, parts.port or default_port


# Who a Kafka client logs in as: the operator's commands (topics, kafka, status, tests'
# admin calls), the scrapers' producers, the Connect worker, Spark's bronze queries; the
# embedded brokers themselves (between brokers and controllers) as `broker`.
KafkaRole = Literal["operator", "scrapers", "connect", "spark"]
KAFKA_ROLES: tuple[KafkaRole, ...] = ("operator", "scrapers", "connect", "spark")
# The principals the brokers know from their own JAAS file (SASL/PLAIN): the brokers and
# the operator, who creates the others' SCRAM credentials (stored in the cluster metadata,
# so they cannot exist before someone has logged in).
KAFKA_PLAIN_USERS = ("broker", "operator")


class KafkaSettings(_Section):
    bootstrap_servers: str
    topic_prefix: str = ""
    dlq_topic_suffix: str = ".dlq"
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int = Field(default=1, ge=1)
    # Authentication: "sasl" - every client logs in over SASL_PLAINTEXT (loopback) as its
    # role's user, named as the role: the scrapers, Connect and Spark with SCRAM-SHA-512,
    # the operator and the brokers with PLAIN; passwords from LAKEHOUSE_KAFKA__<ROLE>_PASSWORD
    # (.env). "none": a cluster without authentication (PLAINTEXT).
    auth: Literal["none", "sasl"] = "none"
    broker_password: SecretStr | None = None
    operator_password: SecretStr | None = None
    scrapers_password: SecretStr | None = None
    connect_password: SecretStr | None = None
    spark_password: SecretStr | None = None

    def login(self, role: KafkaRole | Literal["broker"]) -> tuple[str, str]:
        """(user, password) of a role; ValueError naming the variable when it is unset."""
        password = getattr(self, f"{role}_password")
        if password is None or not password.get_secret_value():
            raise ValueError(
                f"kafka.auth is sasl and the Kafka password of {role!r} is not set: define "
                f"LAKEHOUSE_KAFKA__{role.upper()}_PASSWORD in the environment or in .env "
                "(`make setup` writes one)")
        if any(c in password.get_secret_value() for c in '"\\'):
            raise ValueError(f"LAKEHOUSE_KAFKA__{role.upper()}_PASSWORD holds a quote or a "
                             "backslash, which a JAAS line cannot carry: choose another")
        return role, password.get_secret_value()

    def mechanism(self, role: KafkaRole | Literal["broker"]) -> str:
        return "PLAIN" if role in KAFKA_PLAIN_USERS else "SCRAM-SHA-512"

    def client_auth(self, role: KafkaRole) -> dict[str, str]:
        """librdkafka's (confluent-kafka) settings that log `role` in; none without auth."""
        if self.auth == "none":
            return {}
        user, password = self.login(role)
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": self.mechanism(role),
                "sasl.username": user, "sasl.password": password}

    def java_client_auth(self, role: KafkaRole | Literal["broker"]) -> dict[str, str]:
        """The same for a Java client (Kafka Connect, Spark's `kafka.` options)."""
        if self.auth == "none":
            return {}
        user, password = self.login(role)
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if self.mechanism(role) == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": self.mechanism(role),
                "sasl.jaas.config": f'{module} required username="{user}" '
                                    f'password="{password}";'}

    @field_validator("bootstrap_servers")
    @classmethod
    def _has_port(cls, value: str) -> str:
        for server in value.split(","):
            _host_port(server.strip(), 9092)
        return value

    def first_server(self) -> tuple[str, int]:
        return _host_port(self.bootstrap_servers.split(",")[0].strip(), 9092)

    def topic(self, declared: str) -> str:
        """A topic as files name it (connectors/topics/, table files) -> as on the broker:
        the prefix in front, or where the name says `{prefix}` (Debezium's heartbeat topic
        `__debezium-heartbeat.{prefix}rentals_db`). The one place the prefix is applied."""
        if "{prefix}" in declared:
            return declared.replace("{prefix}", self.topic_prefix)
        return self.topic_prefix + declared


class ConnectSettings(_Section):
    url: str
    group_id: str = "lakehouse-connect"
    internal_topic_prefix: str = "_connect-"
    # REST API basic auth: the embedded worker requires it when a password is set (setup
    # generates one into .env); every client of the project sends it.
    user: str = "lakehouse"
    password: SecretStr | None = None
    # The one folder whose files connectors may read or write (the FileStream connectors'
    # `file`); relative to state_dir unless absolute. The worker refuses any other path.
    file_dir: str = "drops"

    def auth(self) -> tuple[str, str] | None:
        """(user, password) for the REST API, or None for a worker without authentication."""
        if self.password is None or not self.password.get_secret_value():
            return None
        return self.user, self.password.get_secret_value()

    def host_port(self) -> tuple[str, int]:
        return _host_port(self.url, 8083)


class S3Settings(_Section):
    endpoint: str
    region: str = "us-east-1"
    bucket: str
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None

    def host_port(self) -> tuple[str, int]:
        return _host_port(self.endpoint, 80)

    def credentials(self) -> tuple[str, str]:
        """The access and secret key, or a ConfigError-worthy ValueError naming the variables."""
        if self.access_key is None or self.secret_key is None:
            raise ValueError(
                "S3 credentials are not set: define LAKEHOUSE_S3__ACCESS_KEY and "
                "LAKEHOUSE_S3__SECRET_KEY in the environment or in .env "
                "(`make setup` writes a .env with generated local credentials)"
            )
        return self.access_key.get_secret_value(), self.secret_key.get_secret_value()


# The logins of PostgreSQL: `admin` administers (the embedded cluster's superuser),
# `app` is the rentals application, `cdc` is Debezium (connectors/rentals/roles.py).
PostgresLogin = Literal["admin", "app", "cdc"]


class PostgresSettings(_Section):
    host: str
    port: int = Field(ge=1, le=65535)
    database: str
    # The administrator: the embedded cluster's superuser (initdb). It creates the roles
    # below, the databases and the CDC publication, and owns the Hive metastore and Airflow
    # databases; the application and Debezium never log in as it.
    user: str
    password: SecretStr | None = None
    # The rentals application (seed, traffic): owns the rentals database and its tables;
    # no superuser, no replication.
    app_user: str = "lakehouse_app"
    app_password: SecretStr | None = None
    # Debezium: LOGIN REPLICATION, CONNECT and SELECT on the captured tables, nothing else.
    cdc_user: str = "lakehouse_cdc"
    cdc_password: SecretStr | None = None
    # Database of the Hive metastore: the catalog of lakehouse tables shared by every Spark
    # process (ingest, transform, notebooks), in this same PostgreSQL server; the first
    # Spark session creates it when missing.
    metastore_database: str = "metastore"

    @model_validator(mode="after")
    def _distinct_roles(self) -> PostgresSettings:
        """One role per purpose: sharing one would hand its privileges to the other."""
        names = [self.user, self.app_user, self.cdc_user]
        if len(set(names)) != len(names):
            raise ValueError(f"postgres.user, app_user and cdc_user must differ, not {names}")
        return self

    def login(self, role: PostgresLogin = "admin") -> tuple[str, str]:
        """(user, password) of one login; ValueError naming the variable when it is unset."""
        user, password, variable = {
            "admin": (self.user, self.password, "LAKEHOUSE_POSTGRES__PASSWORD"),
            "app": (self.app_user, self.app_password, "LAKEHOUSE_POSTGRES__APP_PASSWORD"),
            "cdc": (self.cdc_user, self.cdc_password, "LAKEHOUSE_POSTGRES__CDC_PASSWORD"),
        }[role]
        if password is None:
            raise ValueError(
                f"PostgreSQL password of {user!r} is not set: define {variable} in the "
                "environment or in .env (`make setup` writes one)"
            )
        return user, password.get_secret_value()

    def dsn_kwargs(self, role: PostgresLogin = "admin") -> dict[str, str | int]:
        user, password = self.login(role)
        return {
            "host": self.host,
            "port": self.port,
            "dbname": self.database,
            "user": user,
            "password": password,
        }


# Host names of a server on this machine (a standalone master the stack starts).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


class SparkSettings(_Section):
    """Local Spark sized for a 2-core laptop; `master` may name a real cluster (with
    embedded.spark_workers, the standalone master the stack starts on this machine)."""

    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = Field(default=4, ge=1)
    ui_enabled: bool = False
    ui_port: int = Field(default=4040, ge=1, le=65535)
    log_level: str = "WARN"
    # JVM options of the Spark driver (spark.driver.extraJavaOptions): the embedded
    # profile's serial collector, the test profile's "-XX:TieredStopAtLevel=1" for its
    # many short-lived drivers.
    driver_java_options: str = ""
    # Extra Spark confs, e.g. {"spark.executor.memory": "4g"} on a cluster.
    conf: dict[str, str] = Field(default_factory=dict)
    # A bronze micro-batch of at most this many records, a silver one writing at most this
    # many rows to a table and a gold round replacing at most this many keys commit from
    # the driver with delta-rs (no Spark job of the write's own, no rebuild of the table's
    # state); larger ones are written by Spark's executors. 0: always Spark.
    driver_commit_rows: int = Field(default=10_000, ge=0)

    @property
    def is_local(self) -> bool:
        """Whether the executors run inside the driver's JVM (`local[...]`)."""
        return self.master.startswith("local")

    @property
    def on_loopback(self) -> bool:
        """Whether the driver and its executors all run on this machine (a local master,
        or a standalone master on 127.0.0.1): then every Spark process binds to loopback."""
        if self.is_local:
            return True
        return urlsplit(self.master).hostname in LOOPBACK_HOSTS


class LakehouseSettings(_Section):
    """Where Delta tables and streaming checkpoints live."""

    # Tables go to s3://<s3.bucket>/<tables_prefix>/<table name>.
    tables_prefix: str = "tables"
    # Streaming checkpoints: a local folder under the state folder (relative) or a URI.
    checkpoint_dir: str = "checkpoints"


class GoldSettings(_Section):
    """Gold aggregates (spark_streaming/gold)."""

    # Weather location (silver_weather_hourly.location_id) joined to the rentals; null: per
    # day the location with the most hours of data (ties: the smallest id).
    weather_location_id: str | None = None


def _interval(seconds: float) -> str:
    """Seconds as a Spark trigger interval, to the millisecond."""
    return f"{round(seconds * 1000)} milliseconds"


class IngestSettings(_Section):
    """How `lakehouse ingest` rides out a server outage (cli/ingest_service.py)."""

    # A continuous query, the gold loop or the traffic generator that keeps failing is
    # retried with a growing pause (5 s, doubling, at most 60 s) for this long, then the
    # service stops with the cause.
    recovery_timeout_seconds: float = Field(default=600.0, gt=0)
    # Embedded profile: how often the service checks that every server of the stack runs
    # (a dead one is started again, as `lakehouse up` would) and every connector task runs.
    watch_interval_seconds: float = Field(default=5.0, gt=0)
    # A FAILED connector or task is restarted at most this many times per hour; then the
    # service reports it loudly on every check and leaves it to the operator.
    connector_restarts_per_hour: int = Field(default=5, ge=0)
    # The pause before the first retry of a failing part, doubling up to the longest.
    retry_first_pause_seconds: float = Field(default=5.0, gt=0)
    retry_longest_pause_seconds: float = Field(default=60.0, gt=0)
    # A continuous run prints one progress line per layer this often.
    progress_interval_seconds: float = Field(default=30.0, gt=0)
    # A continuous run updates gold in one round this often.
    gold_interval_seconds: float = Field(default=60.0, gt=0)
    # A continuous run's bronze queries trigger this often; silver's twice as often.
    # Spark starts a processing-time batch at the multiples of its interval since the
    # epoch, so queries of one interval all trigger together and silver, on bronze's
    # interval, read a bronze commit only at the next boundary: a whole interval of waiting
    # per record. On half the interval its every other trigger falls midway between two
    # of bronze's, after bronze committed (docs/architecture.md, "Silver triggers between
    # two of bronze's").
    trigger_interval_seconds: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _longest_pause_not_shorter(self) -> IngestSettings:
        if self.retry_longest_pause_seconds < self.retry_first_pause_seconds:
            raise ValueError("retry_longest_pause_seconds is shorter than "
                             "retry_first_pause_seconds")
        return self

    @property
    def bronze_trigger(self) -> str:
        """Bronze's processing-time trigger, as Spark takes it."""
        return _interval(self.trigger_interval_seconds)

    @property
    def silver_trigger_seconds(self) -> float:
        """Half of bronze's interval, so silver triggers between two of bronze's triggers."""
        return self.trigger_interval_seconds / 2

    @property
    def silver_trigger(self) -> str:
        """Silver's processing-time trigger, as Spark takes it."""
        return _interval(self.silver_trigger_seconds)

    @property
    def retry_pauses(self) -> tuple[float, float]:
        """(first, longest) pause between retries of a failing part."""
        return (self.retry_first_pause_seconds, self.retry_longest_pause_seconds)


class AnalysisSettings(_Section):
    """The analysis layer: the dbt project, its docs site and the SQL notebooks."""

    # Folders relative to the project folder unless absolute.
    dbt_project_dir: str = "dbt"
    notebooks_dir: str = "notebooks"
    # `lakehouse notebooks --docs-figures` writes each notebook's `docs-figure` PNG here
    # (the README and the dbt docs overview show them; dbt/assets links to docs/images).
    docs_figures_dir: str = "docs/images"
    # The dbt docs site (`lakehouse docs`) is served on 127.0.0.1 at this port.
    docs_port: int = Field(default=18580, ge=1, le=65535)
    # Seconds a notebook cell may run in `lakehouse notebooks` before it is called failed.
    notebook_cell_timeout_seconds: int = Field(default=600, ge=1)
    # Notebooks `lakehouse notebooks` runs side by side, each its own kernel and Spark
    # driver (about 1 GB each): a notebook's queries keep about one core busy.
    notebook_jobs: int = Field(default=2, ge=1)


class RentalsSettings(_Section):
    """The rentals database (Debezium CDC source) and its traffic generator."""

    # Changes per second the traffic generator makes (inserts, updates, deletes together).
    traffic_rate_per_s: float = Field(default=2.0, gt=0, le=1000)
    seed: int = 7
    stations: int = Field(default=25, ge=1, le=10000)
    bikes: int = Field(default=150, ge=1, le=100000)
    # Share of new rentals cancelled (deleted) instead of ended.
    cancel_share: float = Field(default=0.1, ge=0, le=1)


class SimulatorSettings(_Section):
    """The loopback GBFS + weather feed simulator that the default source files point at."""

    host: str = "127.0.0.1"
    port: int = Field(default=18180, ge=1, le=65535)
    seed: int = 42

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ScraperSettings(_Section):
    """How the HTTP scrapers fetch and produce (sources themselves are files in sources_dir)."""

    # Folder of source files, relative to the project folder unless absolute.
    sources_dir: str = "connectors/sources"
    user_agent: str = "lakehouse-ingest-scraper/0.1 (+https://github.com/lakehouse-ingest)"
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    read_timeout_seconds: float = Field(default=15.0, gt=0)
    # Retries of 5xx answers, timeouts and connection errors (exponential backoff + jitter).
    retries: int = Field(default=4, ge=0)
    backoff_factor: float = Field(default=0.5, ge=0)
    backoff_max_seconds: float = Field(default=60.0, ge=0)
    backoff_jitter_seconds: float = Field(default=0.5, ge=0)
    # How long to wait for the broker to acknowledge a snapshot before calling it failed.
    delivery_timeout_seconds: float = Field(default=30.0, gt=0)
    # The scrapers' dedupe state (one file per source), relative to the state folder unless
    # absolute: a scrape sharing it never produces a snapshot twice.
    state_dir: str = "scrapers"
    # `lakehouse backfill`: one station_status snapshot of each GBFS source per this many
    # seconds of every backfilled day (a divisor of a day).
    backfill_step_seconds: int = Field(default=900, gt=0, le=86400)

    @field_validator("backfill_step_seconds")
    @classmethod
    def _divides_a_day(cls, value: int) -> int:
        if 86400 % value:
            raise ValueError(f"{value} does not divide a day (86400 s) evenly: every "
                             "backfilled day would get snapshots at other times of day")
        return value


class AirflowSettings(_Section):
    """Airflow, which schedules the periodic work (orchestration/dags/); secrets in .env."""

    # Database of Airflow's metadata in the project's PostgreSQL (created when missing).
    database: str = "airflow"
    # The UI's one user (simple auth manager); its password is admin_password.
    admin_user: str = "admin"
    admin_password: SecretStr | None = None
    # Seed of the API's JWT secret and the Fernet key of Airflow's connections.
    secret_key: SecretStr | None = None
    # Task instances running at once (LocalExecutor); the tasks are Spark jobs on 2 cores.
    parallelism: int = Field(default=2, ge=1, le=32)
    # Retries of a failed task, and the wait between them.
    retries: int = Field(default=2, ge=0)
    retry_delay_seconds: int = Field(default=60, ge=0)


# Broker n of the embedded cluster listens on the configured client and controller ports
# plus this many times n-1: the two ports of a node sit next to each other (19092/19093,
# then 19094/19095, ...), so a cluster takes one contiguous block of 2 x brokers ports.
KAFKA_NODE_PORT_STRIDE = 2


@dataclass(frozen=True)
class SparkDaemon:
    """The embedded standalone master (worker 0) or worker n: its RPC and web UI ports."""

    worker: int
    port: int
    ui_port: int


@dataclass(frozen=True)
class KafkaNode:
    """One embedded KRaft node (broker and controller): its id and both of its ports."""

    node_id: int
    host: str
    port: int
    controller_host: str
    controller_port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def controller_address(self) -> str:
        return f"{self.controller_host}:{self.controller_port}"


class EmbeddedSettings(_Section):
    enabled: bool = True
    # The Kafka broker's KRaft controller listener (its client port is in kafka.bootstrap_servers).
    kafka_controller_port: int = Field(default=19093, ge=1, le=65535)
    # KRaft nodes, each broker and controller in its own JVM (`lakehouse up --brokers N`).
    kafka_brokers: int = Field(default=1, ge=1, le=9)
    # Maximum JVM heaps (-Xmx) of the broker and the Connect worker.
    kafka_heap: str = Field(default="512m", pattern=r"^[0-9]+[mMgG]$")
    # More JVM options of each embedded broker (space-separated), e.g. for short-lived ones.
    kafka_java_options: str = ""
    connect_heap: str = Field(default="512m", pattern=r"^[0-9]+[mMgG]$")
    # The SQL endpoint: Spark's Thrift server (HiveServer2 protocol: beeline, JDBC, PyHive,
    # dbt-spark's thrift method) over the shared catalog on 127.0.0.1:sql_endpoint_port.
    # `lakehouse up` starts it when true (or with `up --sql-endpoint`); off by default, as
    # it is one more Spark driver (spark.driver_memory).
    sql_endpoint: bool = False
    sql_endpoint_port: int = Field(default=18010, ge=1, le=65535)
    # The feed simulator the default scraper sources read (simulator.host:port) as a server
    # of the stack: `lakehouse up` starts it, so the scrapers and Airflow's scrape DAGs have
    # their feeds. False: none is started (a test's or your own `lakehouse simulator`).
    simulator: bool = True
    # Airflow (API server with the UI, scheduler, DAG processor, triggerer): `lakehouse up`
    # starts it when true (or with `up --airflow`); off by default, the ingest needs none.
    airflow: bool = False
    airflow_port: int = Field(default=18280, ge=1, le=65535)
    # A Spark standalone cluster of the stack's own: a master on the port of spark.master
    # (spark://127.0.0.1:<port>) and this many workers, each its own JVM; 0: none (Spark
    # runs inside the driver, spark.master local[N]). Ports: see Settings.spark_daemons.
    spark_workers: int = Field(default=0, ge=0, le=4)
    # What each worker offers its executors (one executor per worker and application).
    spark_worker_cores: int = Field(default=1, ge=1)
    spark_worker_memory: str = Field(default="1g", pattern=r"^[0-9]+[mMgG]$")


class Settings(_Section):
    """The resolved configuration of one profile (values from yaml, .env and environment)."""

    profile: str
    project_dir: Path
    state_dir: Path
    tools_dir: Path
    kafka: KafkaSettings
    connect: ConnectSettings
    s3: S3Settings
    postgres: PostgresSettings
    embedded: EmbeddedSettings = Field(default_factory=EmbeddedSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    lakehouse: LakehouseSettings = Field(default_factory=LakehouseSettings)
    simulator: SimulatorSettings = Field(default_factory=SimulatorSettings)
    scraper: ScraperSettings = Field(default_factory=ScraperSettings)
    rentals: RentalsSettings = Field(default_factory=RentalsSettings)
    gold: GoldSettings = Field(default_factory=GoldSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings)
    airflow: AirflowSettings = Field(default_factory=AirflowSettings)

    @model_validator(mode="after")
    def _kafka_ports_distinct(self) -> Settings:
        """The derived client and controller ports of all brokers must not overlap."""
        ports = [p for node in self.kafka_nodes() for p in (node.port, node.controller_port)]
        if len(set(ports)) != len(ports):
            raise ValueError(
                f"embedded.kafka_brokers={self.embedded.kafka_brokers}: the brokers' ports "
                f"{ports} overlap; keep embedded.kafka_controller_port outside kafka.bootstrap_"
                f"servers' port + 0..{KAFKA_NODE_PORT_STRIDE * self.embedded.kafka_brokers - 1}")
        return self

    @model_validator(mode="after")
    def _spark_master_for_workers(self) -> Settings:
        """Embedded workers need a standalone master on this machine to join."""
        if self.embedded.enabled and self.embedded.spark_workers:
            self.spark_master_address()
        return self

    def spark_master_address(self) -> tuple[str, int]:
        """Host and port of spark.master when it names a standalone master on loopback."""
        parts = urlsplit(self.spark.master)
        if parts.scheme != "spark" or parts.hostname not in LOOPBACK_HOSTS \
                or parts.port is None:
            raise ValueError(f"spark.master is {self.spark.master!r}: with embedded."
                             "spark_workers it must be spark://127.0.0.1:<port>, the "
                             "standalone master the stack starts")
        return parts.hostname, parts.port

    @property
    def jars_in_place(self) -> bool:
        """Whether every JVM that runs tasks can read Spark's jars where `lakehouse setup`
        put them: a local master (one JVM), or the standalone workers the stack starts on
        this machine (`embedded.spark_workers`)."""
        return self.spark.is_local or (self.embedded.enabled and self.embedded.spark_workers > 0)

    def spark_daemons(self) -> list[SparkDaemon]:
        """The embedded master (0) and workers: the ONE place their ports come from. The
        master listens on spark.master's port, its web UI on the next; worker n on that
        port + 2n and its UI on the one after (one contiguous block, as Kafka's nodes)."""
        if not self.embedded.spark_workers:
            return []
        _, port = self.spark_master_address()
        return [SparkDaemon(n, port + 2 * n, port + 2 * n + 1)
                for n in range(self.embedded.spark_workers + 1)]

    def kafka_node(self, node_id: int) -> KafkaNode:
        """Node `node_id` (1-based) of the embedded Kafka: the ONE place its ports come from.
        Node 1 is exactly the configured broker, so one broker is the plain setup."""
        host, port = self.kafka.first_server()
        offset = KAFKA_NODE_PORT_STRIDE * (node_id - 1)
        return KafkaNode(node_id, host, port + offset, "127.0.0.1",
                         self.embedded.kafka_controller_port + offset)

    def kafka_nodes(self, count: int | None = None) -> list[KafkaNode]:
        """The configured number of embedded nodes (or `count` of them)."""
        return [self.kafka_node(n) for n in range(1, (count or self.embedded.kafka_brokers) + 1)]

    def with_kafka_brokers(self, count: int) -> Settings:
        """These settings with another broker count, validated again (ports must not overlap)."""
        values = self.model_dump()
        values["embedded"]["kafka_brokers"] = count
        return Settings.model_validate(values)

    @property
    def kafka_bootstrap(self) -> str:
        """What clients bootstrap from: every embedded broker, so that any one of them may be
        down; kafka.bootstrap_servers as configured otherwise (an external cluster)."""
        if self.embedded.enabled and self.embedded.kafka_brokers > 1:
            return ",".join(node.address for node in self.kafka_nodes())
        return self.kafka.bootstrap_servers

    @field_validator("state_dir", "tools_dir")
    @classmethod
    def _not_empty(cls, value: Path) -> Path:
        if str(value) in ("", "."):
            raise ValueError("state_dir must name a folder of its own")
        return value

    def _absolute(self, path: Path) -> Path:
        return (path if path.is_absolute() else self.project_dir / path).resolve()

    @property
    def state_path(self) -> Path:
        """Absolute state folder (a relative `state_dir` is taken from the project folder)."""
        return self._absolute(self.state_dir)

    @property
    def scraper_state_path(self) -> Path:
        """Absolute folder of the scrapers' dedupe state (scraper.state_dir)."""
        folder = Path(self.scraper.state_dir)
        return folder if folder.is_absolute() else self.state_path / folder

    @property
    def connect_file_path(self) -> Path:
        """Absolute folder of the files connectors may read or write (connect.file_dir)."""
        folder = Path(self.connect.file_dir)
        return folder if folder.is_absolute() else self.state_path / folder

    @property
    def tables_uri(self) -> str:
        """Root URI of the lakehouse's Delta tables."""
        return f"s3://{self.s3.bucket}/{self.lakehouse.tables_prefix.strip('/')}"

    @property
    def checkpoint_root(self) -> str:
        """Root of streaming checkpoints: an absolute path or a URI."""
        value = self.lakehouse.checkpoint_dir
        if "://" in value or value.startswith("/"):
            return value
        return str(self.state_path / value)

    def project_path(self, path: str) -> Path:
        """A configured folder as an absolute path (relative ones start at the project)."""
        return self._absolute(Path(path))

    @property
    def tools_path(self) -> Path:
        """Absolute folder of the installed third-party binaries and jars."""
        return self._absolute(self.tools_dir)
