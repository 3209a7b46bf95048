"""Live: the real `lakehouse ingest` (every source at its default rate: the scrapers on the
feed simulator, the rentals generator through Debezium) on the benchmark's own stack, for
BENCH_LIVE_SECONDS (default 600) after BENCH_LIVE_WARMUP_SECONDS (default 180). What the
topics already hold is caught up first (`lakehouse ingest --until-caught-up`, timed), so
the window measures live traffic, not a backlog.

Figures of the measured window:
- per silver table fed by a stream: Kafka record timestamp -> commit of the silver version
  that inserted (or, for CDC, updated) the row, p50/p95/max over the records produced in
  the window, from the table's change data feed joined to its bronze table on the Kafka
  coordinates; and the part of it before bronze's micro-batch began (bronze's
  `ingested_at`: the wait for bronze's trigger);
- average CPU (cores) of the Spark driver JVM with its Python workers
  (`spark_driver_cpu_cores`), of the whole ingest process tree (`ingest_cpu_cores`: the
  Python driver, scrapers, generator and the JVM) and of the ingest plus every server of
  the stack (`stack_cpu_cores`), sampled every second (a process living less than that
  is missed: lower bounds);
- where the driver JVM's CPU goes: its threads' CPU over the window, grouped by thread
  name (`spark_driver_cpu_by_thread`: the task threads, the streaming queries' threads,
  the JIT compilers, the garbage collector, ...; from /proc, Linux only).
The run has its own tables, checkpoints and catalog database (removed after); its ingest
log stays under the state folder's bench/.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.machine import machine_info, stop_ingest
from benchmarks.station_status import PROFILE, remove_tables, run_lake, running_stack
from infra.stack import Stack
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings

SECONDS = float(os.environ.get("BENCH_LIVE_SECONDS", "600"))
WARMUP_SECONDS = float(os.environ.get("BENCH_LIVE_WARMUP_SECONDS", "180"))
# silver table -> the bronze table its rows come from (one topic each)
TABLES = {"silver_station_status": "bronze_bikes_station_status",
          "silver_vehicle_status": "bronze_bikes_vehicle_status",
          "silver_rentals": "bronze_bikes_rentals_db_public_rentals"}
TARGET_P95_S = 10.0
TARGET_DRIVER_CORES = 0.5
PROJECT_DIR = Path(__file__).resolve().parents[1]


def _epoch(moment: datetime) -> float:
    """delta-rs gives commit timestamps without a zone: UTC."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class CpuSampler:
    """CPU seconds per process, sampled every second, for the processes `select` picks."""

    def __init__(self, select: Any) -> None:
        self.select = select
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.began = self.ended = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in self.select():
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    used = times.user + times.system
                    self.first.setdefault(proc.pid, used)
                    self.last[proc.pid] = used
            self._stop.wait(1.0)

    def __enter__(self) -> CpuSampler:
        self.began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.ended = time.monotonic()

    @property
    def cores(self) -> float:
        used = sum(self.last[pid] - self.first[pid] for pid in self.last)
        return round(used / max(self.ended - self.began, 1e-9), 3)


def _thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of process `pid`: (name, CPU seconds so far), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            threads[int(stat.parent.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def _thread_group(name: str) -> str:
    """A thread's name without its number: `Executor task l` for every task thread (the
    kernel keeps 15 characters of a name), `C2 CompilerThre`, `GC Thread`, ..."""
    return re.sub(r"[-#\s]*\d+$", "", name).strip() or name


def cpu_by_thread(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                  seconds: float) -> dict[str, float]:
    """Cores per thread group between two `_thread_cpu` snapshots, largest first (a thread
    that ended in between is missed)."""
    groups: dict[str, float] = {}
    for tid, (name, used) in after.items():
        start = before.get(tid, (name, 0.0))[1]
        groups[_thread_group(name)] = groups.get(_thread_group(name), 0.0) + used - start
    return {name: round(used / seconds, 3) for name, used in
            sorted(groups.items(), key=lambda item: -item[1]) if used / seconds >= 0.001}


def _driver_jvms(pid: int) -> list[psutil.Process]:
    """The SparkSubmit JVM(s) under the ingest."""
    found = []
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            if "org.apache.spark.deploy.SparkSubmit" in " ".join(proc.cmdline()):
                found.append(proc)
    return found


def _driver_jvm(pid: int) -> int | None:
    return next((proc.pid for proc in _driver_jvms(pid)), None)


def _tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def _spark_driver(pid: int) -> list[psutil.Process]:
    """The SparkSubmit JVM(s) under the ingest and their children (Python workers)."""
    return [proc for jvm in _driver_jvms(pid) for proc in _tree(jvm.pid)]


def _servers(settings: Settings) -> list[psutil.Process]:
    found = []
    for component in Stack(settings).components:
        pid = component.process.pid()
        if pid is not None:
            found += _tree(pid)
    return found


def _latencies(lake: Settings, silver: str, bronze: str, began: float,
               ended: float) -> dict[str, Any]:
    """Kafka timestamp -> silver commit of each row produced in the window."""
    uri = table_uri(lake, silver)
    table = DeltaTable(uri, storage_options=storage_options(lake, uri))
    changes = pa.RecordBatchReader.from_stream(table.load_cdf(starting_version=0)).read_all()
    rows = changes.select(["_change_type", "_commit_timestamp", "kafka_partition",
                           "kafka_offset"]).to_pylist()
    rows = [row for row in rows if row["_change_type"] in ("insert", "update_postimage")]
    committed = [_epoch(row["_commit_timestamp"]) for row in rows]
    coordinates = [(row["kafka_partition"], row["kafka_offset"]) for row in rows]
    uri = table_uri(lake, bronze)
    source = DeltaTable(uri, storage_options=storage_options(lake, uri)).to_pyarrow_table(
        columns=["partition", "offset", "kafka_timestamp", "ingested_at"])
    produced = {(p, o): (_epoch(t), _epoch(i)) for p, o, t, i in zip(
        source["partition"].to_pylist(), source["offset"].to_pylist(),
        source["kafka_timestamp"].to_pylist(), source["ingested_at"].to_pylist(),
        strict=True)}
    measured = [(commit - produced[key][0], produced[key][1] - produced[key][0])
                for commit, key in zip(committed, coordinates, strict=True)
                if key in produced and began <= produced[key][0] <= ended]
    del table
    if not measured:
        return {"rows_measured": 0}
    seconds = sorted(total for total, _ in measured)
    # the part spent before bronze's micro-batch began (ingested_at is its start time):
    # the wait for bronze's trigger; the rest is bronze's batch, silver's wait and batch
    waits = sorted(wait for _, wait in measured)
    return {"rows_measured": len(seconds),
            "latency_p50_s": round(statistics.median(seconds), 2),
            "latency_p95_s": _p95(seconds),
            "latency_max_s": round(seconds[-1], 2),
            "to_bronze_batch_p50_s": round(statistics.median(waits), 2),
            "to_bronze_batch_p95_s": _p95(waits)}


def _p95(ordered: list[float]) -> float:
    return round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2)


def run(report: Any = print) -> dict[str, Any]:
    settings = load_settings(PROFILE)
    load_before = round(os.getloadavg()[0], 2)
    with running_stack():
        lake = run_lake(settings, "live")
        metastore = "bench_" + lake.lakehouse.tables_prefix.rsplit("-", 1)[-1]
        env = {**os.environ, "LAKEHOUSE_PROFILE": PROFILE,
               "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": lake.lakehouse.tables_prefix,
               "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": lake.lakehouse.checkpoint_dir,
               "LAKEHOUSE_POSTGRES__METASTORE_DATABASE": metastore}
        log = settings.state_path / "bench" / "live-ingest.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            report("catching up what the topics hold (ingest --until-caught-up)")
            began = time.monotonic()
            subprocess.run([sys.executable, "-m", "cli.main", "ingest", "--until-caught-up"],
                           env=env, cwd=PROJECT_DIR, check=True, capture_output=True,
                           timeout=3600)
            catch_up_s = round(time.monotonic() - began, 1)
            with log.open("w") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "cli.main", "ingest"], env=env, cwd=PROJECT_DIR,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    result = _measure(settings, lake, process, report)
                finally:
                    began = time.monotonic()
                    stop_ingest(process)
                    result_stop = round(time.monotonic() - began, 1)
            result["catch_up_seconds"] = catch_up_s
            result["ingest_stop_seconds"] = result_stop
            result["ingest_exit_code"] = process.returncode
            result["ingest_log"] = str(log)
        finally:
            remove_tables(lake, report)
    result["load_avg_1m_before"] = load_before
    result["machine"] = machine_info()
    return result


def _wait(process: subprocess.Popen[bytes], seconds: float, what: str, report: Any) -> None:
    began = time.monotonic()
    while (left := seconds - (time.monotonic() - began)) > 0:
        if process.poll() is not None:
            raise RuntimeError(f"ingest exited ({process.returncode}) during the {what}")
        time.sleep(min(60.0, left))
        report(f"  {what}: {time.monotonic() - began:.0f} of {seconds:.0f} s")


def _measure(settings: Settings, lake: Settings, process: subprocess.Popen[bytes],
             report: Any) -> dict[str, Any]:
    report(f"ingest started (pid {process.pid}); warm-up {WARMUP_SECONDS:.0f} s")
    _wait(process, WARMUP_SECONDS, "warm-up", report)
    report(f"measuring for {SECONDS:.0f} s")
    began = time.time()
    jvm = _driver_jvm(process.pid)
    threads_before = _thread_cpu(jvm) if jvm else {}
    with CpuSampler(lambda: _spark_driver(process.pid)) as driver, \
            CpuSampler(lambda: _tree(process.pid)) as ingest, \
            CpuSampler(lambda: _tree(process.pid) + _servers(settings)) as stack:
        _wait(process, SECONDS, "measuring", report)
    ended = time.time()
    by_thread = cpu_by_thread(threads_before, _thread_cpu(jvm), ended - began) if jvm else {}
    tables = {silver: _latencies(lake, silver, bronze, began, ended)
              for silver, bronze in TABLES.items()}
    worst = max((t.get("latency_p95_s", float("inf")) for t in tables.values()),
                default=float("inf"))
    # the streaming queries' triggers (the interval is bronze's; silver's is half of it)
    interval = getattr(lake.ingest, "trigger_interval_seconds", None)
    result = {"seconds": SECONDS, "warmup_seconds": WARMUP_SECONDS,
              "trigger_interval_seconds": interval, "tables": tables,
              "spark_driver_cpu_cores": driver.cores, "ingest_cpu_cores": ingest.cores,
              "stack_cpu_cores": stack.cores, "spark_driver_cpu_by_thread": by_thread,
              "target_p95_s": TARGET_P95_S,
              "target_driver_cores": TARGET_DRIVER_CORES,
              "target_met": worst <= TARGET_P95_S
              and driver.cores <= TARGET_DRIVER_CORES}
    report(f"result: {result}")
    return result
