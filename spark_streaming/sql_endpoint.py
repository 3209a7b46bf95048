"""How to launch the SQL endpoint: Spark's Thrift server (HiveThriftServer2) in its own JVM,
over the shared catalog, with the confs every project Spark process gets (`spark_conf`).

The process itself is supervised by the embedded stack (`infra/components/sql_endpoint.py`):
this module says what to run, the stack runs, checks and stops it. It imports no pyspark.

The server is started the way pyspark starts its own JVM: `$SPARK_HOME/bin/spark-submit`
(the installed pyspark's, which also ships the thriftserver and beeline jars), so Spark's
launcher applies `spark.driver.memory`, `spark.driver.extraClassPath` and the JVM module
options Java 17 needs. The confs go in a properties file, not on the command line: they
hold the S3 keys and the metastore's password.
"""

from __future__ import annotations

import os
from pathlib import Path

from settings import Settings
from spark_streaming.spark_conf import LOOPBACK, QUIET_LOGGERS, pyspark_home, spark_confs

THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
THRIFT_SERVER_ARTIFACT = "spark-hive-thriftserver_2.13"
APP_NAME = "lakehouse-sql-endpoint"


def spark_home() -> Path:
    """SPARK_HOME when the user set one (a Spark installation), else the installed pyspark:
    the same rule as the SparkSessions of the project."""
    chosen = os.environ.get("SPARK_HOME")
    return Path(chosen) if chosen else pyspark_home()


def spark_submit() -> Path:
    return spark_home() / "bin" / "spark-submit"


def thrift_server_jar() -> Path:
    """The Thrift server's jar in the Spark home (or the pattern, when it is missing)."""
    jars = spark_home() / "jars"
    found = sorted(jars.glob(f"{THRIFT_SERVER_ARTIFACT}-[0-9]*.jar"))
    return found[-1] if found else jars / f"{THRIFT_SERVER_ARTIFACT}-<version>.jar"


def jdbc_url(settings: Settings, database: str = "default") -> str:
    """What beeline and JDBC tools connect to (no authentication: any user name)."""
    return f"jdbc:hive2://{LOOPBACK}:{settings.embedded.sql_endpoint_port}/{database}"


def thrift_server_confs(settings: Settings) -> dict[str, str]:
    """The project's Spark confs (`spark_confs`), plus what a Thrift server needs."""
    confs = spark_confs(settings, APP_NAME)
    # Every project jar on the JVM's own class path, not only on spark.jars' class loader:
    # the server opens a client session (and runs the `USE <database>` of a JDBC URL) on
    # its handler threads, which do not see spark.jars ("Cannot find catalog plugin class
    # ... DeltaCatalog" from beeline, measured); the PostgreSQL driver stays on it too.
    class_path = [*confs.get("spark.jars", "").split(","),
                  *confs.get("spark.driver.extraClassPath", "").split(os.pathsep)]
    confs["spark.driver.extraClassPath"] = os.pathsep.join(dict.fromkeys(p for p in class_path
                                                                         if p))
    return confs


def log4j2_properties(settings: Settings) -> str:
    """The server's log4j2 configuration: the level of the project's other Spark JVMs
    (spark.log_level) from the start, their quiet loggers, and the DAGScheduler's "Failed to
    cancel job group" WARN that Spark 4.1 prints each time a client closes a statement."""
    quiet = (*QUIET_LOGGERS, "org.apache.spark.scheduler.DAGScheduler")
    lines = [
        "# written by `lakehouse up` for the SQL endpoint",
        f"rootLogger.level={settings.spark.log_level}",
        "rootLogger.appenderRef.console.ref=console",
        "appender.console.type=Console",
        "appender.console.name=console",
        "appender.console.target=SYSTEM_ERR",
        "appender.console.layout.type=PatternLayout",
        "appender.console.layout.pattern=%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    for index, name in enumerate(quiet):
        lines += [f"logger.quiet{index}.name={name}", f"logger.quiet{index}.level=ERROR"]
    return "\n".join(lines) + "\n"


def with_log_config(confs: dict[str, str], log_config: Path) -> dict[str, str]:
    """`confs` with the driver JVM reading `log_config` (other driver options kept)."""
    option = f"-Dlog4j2.configurationFile={log_config}"
    existing = confs.get("spark.driver.extraJavaOptions", "")
    return {**confs, "spark.driver.extraJavaOptions": f"{existing} {option}".strip()}


def _escape(text: str, key: bool) -> str:
    """`text` for a java.util.Properties file, which Spark reads as UTF-8 (backslash
    escapes; keys also escape the separators, a value its leading comment characters)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char in "=: #!" and (key or (index == 0 and char in " #!")):
            out.append("\\" + char)
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def write_properties(path: Path, confs: dict[str, str]) -> None:
    """The confs as Spark's `--properties-file`, readable by the owner only (secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("# written by `lakehouse up` for the SQL endpoint (secrets: owner only)\n")
        for key, value in confs.items():
            handle.write(f"{_escape(key, key=True)}={_escape(value, key=False)}\n")


def thrift_server_command(settings: Settings, properties_file: Path) -> list[str]:
    """spark-submit of the Thrift server, on 127.0.0.1 and the configured port."""
    return [
        str(spark_submit()),
        "--class", THRIFT_SERVER_CLASS,
        "--properties-file", str(properties_file),
        "spark-internal",
        "--hiveconf", f"hive.server2.thrift.bind.host={LOOPBACK}",
        "--hiveconf", f"hive.server2.thrift.port={settings.embedded.sql_endpoint_port}",
        "--hiveconf", "hive.server2.transport.mode=binary",
    ]


def thrift_server_environment(settings: Settings) -> dict[str, str]:
    """This process's environment with the Spark home and, on a local master, the loopback
    address Spark binds to (as `build_spark_session` sets for its JVM)."""
    environment = {**os.environ, "SPARK_HOME": str(spark_home())}
    if settings.spark.on_loopback:
        environment.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    return environment
