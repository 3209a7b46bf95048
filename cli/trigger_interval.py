"""A trigger interval on the command line (`10 seconds`, `500 ms`, `2`), as seconds."""

from __future__ import annotations

import re

import click

_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0,
          "second": 1.0, "seconds": 1.0, "min": 60.0, "minute": 60.0, "minutes": 60.0}
_INTERVAL = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


class TriggerInterval(click.ParamType):
    """Seconds from `<number> [unit]` (seconds when no unit is given); refused, naming the
    units it knows, before anything starts."""

    name = "interval"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            match = _INTERVAL.fullmatch(str(value).lower())
            unit = (match.group(2) or "s") if match is not None else ""
            if match is None or unit not in _UNITS:
                self.fail(f"{value!r} is not an interval such as '10 seconds', '500 ms' or "
                          f"'2' (units: {', '.join(sorted(set(_UNITS)))})", param, ctx)
            seconds = float(match.group(1)) * _UNITS[unit]
        if seconds <= 0:
            self.fail(f"{value!r}: an interval must be longer than 0", param, ctx)
        return seconds
