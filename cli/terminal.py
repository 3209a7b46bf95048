"""The terminal and the log file of every command, set up in one place.

The terminal gets the command's own progress lines (`say`) and the warnings of the
project's modules; `-v` adds their INFO lines, `-q` leaves only warnings and errors. The
log file, `<state>/logs/lakehouse-<command>.log` (one per command, appended to), gets every
line at INFO (DEBUG with `-v`), third-party libraries from WARNING, and the traceback of a
failure, which the terminal shows as one line naming the file. `kill -USR1 <pid>` appends
every thread's Python stack to the log file (for a command that seems stuck).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

console = Console(stderr=True, highlight=False, soft_wrap=True)
LOG = logging.getLogger(__name__)
# Top-level packages of the project: their warnings reach the terminal.
_PROJECT_PACKAGES = ("lakehouse", "analysis", "cli", "connectors", "expectations", "infra",
                     "settings", "spark_streaming")
_QUIET, _NORMAL, _VERBOSE = -1, 0, 1
_state: dict[str, object] = {"verbosity": _NORMAL, "log_file": None, "stacks_to": None}


class _ProjectWarnings(logging.Handler):
    """Project log records on the terminal from WARNING (INFO with -v); say() prints its own."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.split(".", 1)[0] not in _PROJECT_PACKAGES or record.name == LOG.name:
            return
        floor = logging.INFO if _state["verbosity"] == _VERBOSE else logging.WARNING
        if record.levelno >= floor:
            level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
            console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {escape(level)}"
                          f"{escape(record.getMessage())}")


def set_verbosity(verbose: bool, quiet: bool) -> None:
    """-v / -q of the root command (-q wins); called once per process, before any output."""
    _state["verbosity"] = _QUIET if quiet else _VERBOSE if verbose else _NORMAL
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if _state["verbosity"] == _VERBOSE else logging.INFO)
    if not any(isinstance(h, _ProjectWarnings) for h in root.handlers):
        root.addHandler(_ProjectWarnings())
    # chatter at INFO (Great Expectations' import logs a line per API it leaves out of
    # its own docs: 214 lines in every quality run's log file)
    for package in ("py4j", "urllib3", "botocore", "s3transfer", "httpx", "asyncio",
                    "great_expectations._docs_decorators"):
        logging.getLogger(package).setLevel(logging.WARNING)


def log_to_file(logs_dir: Path, command: str) -> Path:
    """From now on every log line also goes to `logs_dir/lakehouse-<command>.log`."""
    if _state["log_file"] is not None:
        return _state["log_file"]  # type: ignore[return-value]
    path = logs_dir / f"lakehouse-{command}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    _state["log_file"] = path
    # written by the interpreter itself, so it works while every thread is blocked
    stacks_to = path.open("a", encoding="utf-8")
    faulthandler.register(signal.SIGUSR1, file=stacks_to, all_threads=True)
    _state["stacks_to"] = stacks_to  # kept open for the process's life
    LOG.info("lakehouse %s (pid %d)", " ".join(sys.argv[1:]), os.getpid())
    return path


def log_file() -> Path | None:
    return _state["log_file"]  # type: ignore[return-value]


def say(message: str, *, markup: bool = False) -> None:
    """A progress line of the command: on the terminal (not with -q) and in its log file.
    `markup`: the message holds rich markup ([green]...[/green]) to render."""
    LOG.info(Text.from_markup(message).plain if markup else message)
    if _state["verbosity"] != _QUIET:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] "
                      f"{message if markup else escape(message)}")


def report_failure(what: str, exc: BaseException) -> None:
    """One line on the terminal (the cause, where the full log is); the traceback to the log."""
    LOG.error("%s", what, exc_info=exc)
    cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    where = f" (full log: {log_file()})" if log_file() else ""
    console.print(f"[red]{escape(what)}:[/red] {escape(type(exc).__name__)}: "
                  f"{escape(cause)}{escape(where)}")
