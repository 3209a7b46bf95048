"""Port checks: is a loopback port free, who holds it, wait until something answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import psutil


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str:
    """Best-effort description of the process listening on `port`."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    proc = psutil.Process(conn.pid)
                    return f"pid {conn.pid} ({proc.name()})"
                return "another process"
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return "another process"


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.25,
               abort: Callable[[], bool] | None = None) -> bool:
    """Poll `check` until it is true or `timeout` passes; `abort` ends the wait early."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:
            pass
        if abort is not None and abort():
            return False
        time.sleep(interval)
    return False
