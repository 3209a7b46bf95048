"""What machine a figure was measured on, where results are written, and how a benchmark
stops the ingest it started."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil

from settings import Settings


def machine_info() -> dict[str, Any]:
    cpu_model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def write_result(settings: Settings, name: str, result: dict[str, Any]) -> Path:
    folder = settings.state_path / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def stop_ingest(process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Ctrl-C to the ingest's process group (a clean stop), SIGKILL if it does not end."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
