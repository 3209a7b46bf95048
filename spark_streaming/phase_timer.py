"""Seconds of each phase of one unit of work (a silver micro-batch, a gold round), for its
line in the log file and for the benchmarks that say where the time goes."""

from __future__ import annotations

import time


class PhaseTimer:
    """`done(name)` closes the phase that began at the previous call (or at creation)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + now - self._last, 2)
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.seconds.items())
