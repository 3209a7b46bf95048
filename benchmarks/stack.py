"""Fresh-machine `lakehouse setup`, cold `lakehouse up` to all healthy, idle stack RSS.

Runs the CLI as a user would, on the `test` profile's ports with a state folder of its
own. Setup runs into an empty tools folder with an empty Maven repository and empty Go
caches, so every jar is downloaded and MinIO compiled, as on a fresh machine
(BENCH_STACK_SETUP=0 skips it). Baselines measured in the same run: a bare JVM start
(`java -version`), since the broker's and Connect's JVMs dominate start time, so figures
can be compared across noisy machines. Then Airflow (BENCH_STACK_AIRFLOW=0 skips it): the
time `up --airflow` takes on the running stack until its four processes answer, and their
idle RSS, each against the stack's own figure of the same run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.machine import machine_info
from infra.stack import Stack
from settings import load_settings

PROFILE = "test"
TARGET_UP_SECONDS = 30.0
TARGET_RSS_GIB = 2.0


def _cli(env: dict[str, str], *args: str) -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "cli.main", "--profile", PROFILE, *args],
                   env=env, check=True, capture_output=True, text=True)
    return time.monotonic() - began


def _stack_rss_bytes(stack: Stack) -> int:
    return _rss_bytes(stack.reported())


def _rss_bytes(components: list[Any]) -> int:
    """RSS of the components' processes and their children."""
    total = 0
    for component in components:
        pid = component.process.pid()
        if pid is None:
            raise RuntimeError(f"{component.name} is not running")
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
    return total


def _jvm_start_seconds() -> float:
    java = shutil.which("java") or "java"
    runs = []
    for _ in range(3):
        began = time.monotonic()
        subprocess.run([java, "-version"], capture_output=True, check=True)
        runs.append(time.monotonic() - began)
    return statistics.median(runs)


def _fresh_setup(state: Path, report: Any) -> dict[str, Any]:
    """`lakehouse setup` with nothing cached: tools folder, ~/.m2 and Go caches all empty."""
    root = state.parent / "stack-setup"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = {**os.environ, "LAKEHOUSE_TOOLS_DIR": str(root / "tools"),
           "MAVEN_OPTS": f"-Dmaven.repo.local={root / 'm2'}",
           "GOCACHE": str(root / "gocache"), "GOMODCACHE": str(root / "gomodcache")}
    report("fresh-machine setup: empty tools folder, Maven repository and Go caches...")
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "cli.main", "--profile", PROFILE, "setup"],
                            env=env, check=True, capture_output=True, text=True)
    total = time.monotonic() - began
    out = result.stderr + result.stdout
    downloaded = re.search(r"maven: downloaded (\d+) files \((\d+) MB\)", out)
    built = re.search(r"installed: minio .*\(built in (\d+) s\)", out)
    subprocess.run(["go", "clean", "-modcache"], env=env, capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "setup_fresh_s": round(total, 1),
        "setup_maven_files": int(downloaded.group(1)) if downloaded else None,
        "setup_maven_mb": int(downloaded.group(2)) if downloaded else None,
        "setup_minio_build_s": int(built.group(1)) if built else None,
    }


def run(report: Any = print) -> dict[str, Any]:
    base = load_settings(PROFILE)
    state = base.state_path.parent / "bench" / "stack-state"
    setup = (_fresh_setup(state, report) if os.environ.get("BENCH_STACK_SETUP", "1") != "0"
             else {})
    env = {**os.environ, "LAKEHOUSE_STATE_DIR": str(state)}
    settings = load_settings(PROFILE, environ=env)
    stack = Stack(settings)
    _cli(env, "down")
    if state.exists():
        stack.component("postgres").remove_data()  # type: ignore[attr-defined]
        shutil.rmtree(state)
    try:
        report("cold up with empty data folders (includes initdb, bucket creation)...")
        first = _cli(env, "up")
        _cli(env, "down")
        report("cold up with existing data folders (3 runs)...")
        warm = []
        for _ in range(3):
            warm.append(_cli(env, "up"))
            _cli(env, "down")
        _cli(env, "up")
        report("idle stack: sampling RSS for 20 s after 10 s of settling...")
        time.sleep(10)
        samples = []
        for _ in range(10):
            samples.append(_stack_rss_bytes(stack))
            time.sleep(2)
        per_component = {}
        for component in stack.reported():
            root = psutil.Process(component.process.pid())
            rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            per_component[component.name] = round(rss / 2**20)
        total_mib = sum(per_component.values())
        shares = {name: round(mib / total_mib, 2) for name, mib in per_component.items()}
        airflow = (_airflow(env, settings, report)
                   if os.environ.get("BENCH_STACK_AIRFLOW", "1") != "0" else {})
    finally:
        _cli(env, "down")
    jvm = _jvm_start_seconds()
    up_seconds = statistics.median(warm)
    rss_gib = statistics.median(samples) / 2**30
    return {
        "benchmark": "stack",
        "machine": machine_info(),
        **setup,
        "cold_up_first_run_s": round(first, 2),
        "cold_up_s_median": round(up_seconds, 2),
        "cold_up_s_runs": [round(w, 2) for w in warm],
        "idle_rss_gib_median": round(rss_gib, 3),
        "idle_rss_mib_by_component": per_component,
        "idle_rss_share_by_component": shares,
        "baseline_jvm_start_s": round(jvm, 3),
        "ratio_up_to_jvm_start": round(up_seconds / jvm, 1),
        "ratio_up_to_target": round(up_seconds / TARGET_UP_SECONDS, 2),
        "ratio_rss_to_target": round(rss_gib / TARGET_RSS_GIB, 2),
        "target_up_s": TARGET_UP_SECONDS,
        "target_rss_gib": TARGET_RSS_GIB,
        **airflow,
        **({"ratio_airflow_start_to_stack_up": round(airflow["airflow_start_s"] / up_seconds, 2),
            "ratio_airflow_rss_to_stack_rss": round(
                airflow["airflow_idle_rss_gib_median"] / rss_gib, 2)} if airflow else {}),
    }


def _airflow(env: dict[str, str], settings: Any, report: Any) -> dict[str, Any]:
    """`up --airflow` on the running stack, then the idle RSS of Airflow's processes."""
    report("Airflow: up --airflow on the running stack, then 20 s of idle RSS...")
    started = _cli(env, "up", "--airflow")
    with_airflow = Stack(settings.model_copy(update={"embedded": settings.embedded.model_copy(
        update={"airflow": True})}))
    parts = [c for c in with_airflow.reported() if c.name.startswith("airflow")]
    time.sleep(10)
    samples = []
    for _ in range(10):
        samples.append(_rss_bytes(parts))
        time.sleep(2)
    return {"airflow_start_s": round(started, 2), "airflow_processes": len(parts),
            "airflow_idle_rss_gib_median": round(statistics.median(samples) / 2**30, 3)}
