"""A Spark standalone cluster of the stack's own: a master and `embedded.spark_workers`
workers, each its own JVM started from the installed pyspark (`bin/spark-class`, the
launcher Spark's own sbin scripts use), bound to 127.0.0.1 with its web UI there too.

The ingest's driver joins it through spark.master (spark://127.0.0.1:<port>); executors
run on the workers. Ports come from `Settings.spark_daemons`; each daemon's scratch and
executor folders live under `<state>/spark-cluster/`, its log under `<state>/logs/`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import requests

from infra.components import jvm
from infra.components.base import Component, Port
from settings import Settings
from settings.layout import StateLayout
from settings.model import SparkDaemon
from spark_streaming.spark_conf import LOOPBACK, pyspark_home

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CORE_ARTIFACT = "spark-core_2.13"
# Heap of each daemon (not of the executors, which get spark.executor.memory): the master
# and a worker only keep the cluster's bookkeeping.
DAEMON_HEAP = "256m"
# A stopped application's executor folders (a copy of every jar of spark.jars each, 0.6 GB
# for the project's) are deleted this long after it ended, checked every 10 minutes; the
# copies of every ended application go when the worker stops or starts.
APP_DATA_TTL_SECONDS = 3600


def master_state(settings: Settings, timeout: float = 2.0) -> dict[str, Any]:
    """The master's own status document (its web UI's /json/): its state and workers."""
    master = settings.spark_daemons()[0]
    answer = requests.get(f"http://{LOOPBACK}:{master.ui_port}/json/", timeout=timeout)
    answer.raise_for_status()
    return answer.json()


class SparkDaemonComponent(Component):
    """What the master and a worker share: spark-class, loopback, ports, log, version."""

    main_class: str
    start_timeout = 90.0  # a JVM of Spark's ~250 jars on a busy 2-core machine
    stop_timeout = 15.0

    def __init__(self, settings: Settings, layout: StateLayout, worker: int = 0):
        self.worker = worker
        super().__init__(settings, layout)

    @property
    def daemon(self) -> SparkDaemon:
        return self.settings.spark_daemons()[self.worker]

    @property
    def folder(self) -> Path:
        return self.layout.root / "spark-cluster" / self.name

    def ports(self) -> list[Port]:
        setting = "LAKEHOUSE_SPARK__MASTER (the master's port"
        offset = 2 * self.worker
        where = f" + {offset})" if offset else ")"
        return [Port("rpc", self.daemon.port, setting + where),
                Port("web UI", self.daemon.ui_port, f"{setting} + {offset + 1})")]

    def binaries(self) -> list[Path]:
        return [jvm.java(), pyspark_home() / "bin" / "spark-class"]

    def environment(self) -> dict[str, str]:
        """Loopback for the daemon, its web UI and the executors it launches (they inherit
        this environment); scratch space in the state folder, not /tmp."""
        return {
            **os.environ,
            "SPARK_HOME": str(pyspark_home()),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK,
            "SPARK_LOCAL_DIRS": str(self.folder / "local"),
            "SPARK_DAEMON_MEMORY": DAEMON_HEAP,
            "SPARK_NO_DAEMONIZE": "1",
        }

    def prepare(self) -> None:
        (self.folder / "local").mkdir(parents=True, exist_ok=True)

    def arguments(self) -> list[str]:
        return ["--host", LOOPBACK, "--port", str(self.daemon.port),
                "--webui-port", str(self.daemon.ui_port)]

    def command(self) -> list[str]:
        return [str(pyspark_home() / "bin" / "spark-class"), self.main_class,
                *self.arguments()]

    def version(self) -> str:
        jars = pyspark_home() / "jars"
        found = sorted(jars.glob(f"{CORE_ARTIFACT}-[0-9]*.jar"))
        return jvm.jar_version(found[-1], CORE_ARTIFACT) if found else "?"


class SparkMaster(SparkDaemonComponent):
    name = "spark-master"
    marker = MASTER_CLASS
    main_class = MASTER_CLASS

    def address(self) -> str:
        return self.settings.spark.master

    def environment(self) -> dict[str, str]:
        # No REST submission server: a third port (6066, fixed) that would accept jobs
        # from anyone on this machine; the driver submits over the RPC port.
        return {**super().environment(), "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}

    def healthy(self) -> bool:
        return master_state(self.settings).get("status") == "ALIVE"


class SparkWorker(SparkDaemonComponent):
    marker = WORKER_CLASS
    start_group = "spark-workers"  # launched together, then awaited
    main_class = WORKER_CLASS

    def __init__(self, settings: Settings, layout: StateLayout, worker: int):
        self.name = f"spark-worker-{worker}"
        super().__init__(settings, layout, worker)

    def address(self) -> str:
        return f"spark://{LOOPBACK}:{self.daemon.port}"

    def environment(self) -> dict[str, str]:
        # Executor folders of ended applications are removed after an hour (each holds a
        # copy of the application's jars).
        options = ("-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=600 "
                   f"-Dspark.worker.cleanup.appDataTtl={APP_DATA_TTL_SECONDS}")
        return {**super().environment(), "SPARK_WORKER_OPTS": options}

    def drop_application_copies(self) -> None:
        """Remove what executors fetched (a copy of every jar of spark.jars each, and
        Spark's fetch cache): on a worker that does not run, every application has ended.
        Their logs (work/<app>/<executor>/stderr) stay."""
        for jar in self.folder.glob("work/app-*/*/*.jar"):
            jar.unlink(missing_ok=True)
        shutil.rmtree(self.folder / "local", ignore_errors=True)

    def prepare(self) -> None:
        self.drop_application_copies()
        super().prepare()

    def stop(self) -> bool:
        was_running = super().stop()
        self.drop_application_copies()
        return was_running

    def arguments(self) -> list[str]:
        embedded = self.settings.embedded
        return [*super().arguments(),
                "--cores", str(embedded.spark_worker_cores),
                "--memory", embedded.spark_worker_memory,
                "--work-dir", str(self.folder / "work"),
                self.settings.spark.master]

    def healthy(self) -> bool:
        """Registered with the master and ALIVE there (its own UI answering is not enough:
        a worker that lost its master still serves it)."""
        workers = master_state(self.settings).get("workers", [])
        return any(w.get("port") == self.daemon.port and w.get("state") == "ALIVE"
                   for w in workers)


def spark_cluster(settings: Settings, layout: StateLayout) -> list[Component]:
    """The master and its workers when the profile has embedded workers, else nothing."""
    if not settings.embedded.spark_workers:
        return []
    return [SparkMaster(settings, layout),
            *(SparkWorker(settings, layout, n)
              for n in range(1, settings.embedded.spark_workers + 1))]
