"""`lakehouse notebooks`: execute the SQL notebooks headless, check every query returned
rows, and render each executed notebook as HTML under the state folder.

A SQL cell is a code cell whose first line starts with `%%sql`. After such a cell runs, the
runner asks the kernel for the length of the result the cell returned (IPython's `Out`
entry of that execution, a jupysql ResultSet); the cell passes when that is at least one
row. The count is written into the executed notebook as cell metadata `lakehouse.sql_rows`.
Every notebook must also draw at least one figure (an `image/png` output, matplotlib's
inline backend); the figure of a cell tagged `docs-figure` can be copied into the docs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from analysis.notebook_session import QUIET_JUPYSQL_ENV
from settings import Settings
from settings.report import Report

KERNEL_NAME = "lakehouse-venv"
ROWS_METADATA = "lakehouse"
PNG = "image/png"
DOCS_FIGURE_TAG = "docs-figure"  # cell tag: this cell's figure goes into the docs
_STOP_SPARK = ("from pyspark.sql import SparkSession as _LakehouseSession\n"
               "_active = _LakehouseSession.getActiveSession()\n"
               "_active is not None and _active.stop()")


class NotebookError(Exception):
    """A notebook that could not run, or a query that returned nothing; names both."""


@dataclass
class NotebookResult:
    name: str
    source: Path
    executed: Path
    html: Path | None
    kernel_log: Path
    cells: int = 0
    sql_rows: dict[int, int] = field(default_factory=dict)  # cell index -> rows returned
    figures: int = 0  # code cells that drew a PNG figure
    docs_figure: Path | None = None  # where the `docs-figure` cell's PNG was copied
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def is_sql_cell(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith("%%sql")


def notebook_paths(settings: Settings, only: str | None = None) -> list[Path]:
    """The notebooks of `analysis.notebooks_dir`, or the one named `only` (with or without
    .ipynb); raises NotebookError naming what exists when `only` matches none."""
    folder = settings.project_path(settings.analysis.notebooks_dir)
    found = sorted(folder.glob("*.ipynb"))
    if only is None:
        return found
    wanted = only.removesuffix(".ipynb")
    chosen = [path for path in found if path.stem == wanted]
    if not chosen:
        names = ", ".join(path.stem for path in found) or "none"
        raise NotebookError(f"no notebook {only!r} in {folder} (there are: {names})")
    return chosen


def figures_of(notebook: NotebookNode) -> list[tuple[NotebookNode, bytes]]:
    """(cell, PNG bytes) of every figure the executed notebook shows, in cell order."""
    return [(cell, base64.b64decode(output.data[PNG]))
            for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if PNG in output.get("data", {})]


def save_docs_figure(notebook: NotebookNode, target: Path) -> Path | None:
    """Write the first figure of the cell tagged DOCS_FIGURE_TAG to `target`, if any."""
    tagged = [png for cell, png in figures_of(notebook)
              if DOCS_FIGURE_TAG in cell.metadata.get("tags", [])]
    if not tagged:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tagged[0])
    return target


def _first_line(cell: NotebookNode) -> str:
    lines = cell.source.strip().splitlines()
    return lines[0] if lines else ""


class _Signals:
    """Ctrl-C (or SIGTERM) for every notebook of one run: each running cell is
    interrupted and no further notebook starts. One handler for the loop: a handler per
    notebook would replace the one before it."""

    def __init__(self) -> None:
        self.received = False
        self._running: list[_NotebookRun] = []

    def take(self, run: _NotebookRun) -> None:
        self._running.append(run)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._interrupt)

    def release(self, run: _NotebookRun) -> None:
        if run in self._running:
            self._running.remove(run)

    def _interrupt(self) -> None:
        self.received = True
        for run in self._running:
            run.interrupt()


class _NotebookRun:
    """One notebook in its own kernel (the project's interpreter, the CLI's environment)."""

    def __init__(self, settings: Settings, source: Path, work_dir: Path,
                 signals: _Signals) -> None:
        self.settings = settings
        self.source = source
        self.work_dir = work_dir
        self.notebook = nbformat.read(source, as_version=4)
        self.sql_rows: dict[int, int] = {}
        self.empty: list[str] = []
        self.current_cell = -1  # index of the cell running or last run
        self.interrupted = False
        self._interrupting: asyncio.Future[Any] | None = None
        self.client = NotebookClient(
            self.notebook, km=self._kernel_manager(),
            timeout=settings.analysis.notebook_cell_timeout_seconds,
            startup_timeout=120, allow_errors=False, record_timing=True,
            on_notebook_start=lambda notebook: signals.take(self),
            on_cell_execute=self._started,
            on_cell_executed=self._count_rows)

    def _kernel_manager(self) -> AsyncKernelManager:
        # A kernelspec of our own under the state folder: nothing is installed in the
        # user's Jupyter paths, and no other `python3` kernelspec can take its place.
        kernels = self.work_dir / "kernels"
        spec_dir = kernels / KERNEL_NAME
        spec_dir.mkdir(parents=True, exist_ok=True)
        (spec_dir / "kernel.json").write_text(json.dumps({
            # Output of the JVM and Spark's Python workers goes to the kernel's log, not
            # into the cells (ipykernel would forward everything written to fd 1/2).
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--IPKernelApp.capture_fd_output=False"],
            "display_name": "lakehouse (.venv)", "language": "python"}, indent=2))
        specs = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
        connection = self.work_dir / "runtime" / f"kernel-{self.source.stem}.json"
        connection.parent.mkdir(parents=True, exist_ok=True)
        return AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs,
                                  connection_file=str(connection))

    def kernel_env(self) -> dict[str, str]:
        """This process's environment (LAKEHOUSE_* overrides included) plus the profile, so
        the notebook's `load_settings()` resolves the same configuration as the CLI."""
        return {**os.environ, **QUIET_JUPYSQL_ENV,
                "LAKEHOUSE_PROFILE": self.settings.profile,
                "IPYTHONDIR": str(self.work_dir / "ipython"),
                "JUPYTER_RUNTIME_DIR": str(self.work_dir / "runtime"),
                "MPLCONFIGDIR": str(self.work_dir / "matplotlib"),
                "PYDEVD_DISABLE_FILE_VALIDATION": "1"}

    async def _ask(self, code: str, expression: str | None = None) -> dict[str, Any]:
        """Run `code` silently in the kernel; returns the value of `expression` (text)."""
        kc = self.client.kc
        assert kc is not None
        expressions = {"value": expression} if expression else {}
        msg_id = await ensure_async(kc.execute(code, silent=True, store_history=False,
                                               user_expressions=expressions))
        reply = await self.client.async_wait_for_reply(msg_id)
        content = (reply or {}).get("content", {})
        return content.get("user_expressions", {}).get("value", {})

    def interrupt(self) -> None:
        # nbclient's own handlers would tear the kernel down under the running cell;
        # this interrupts the cell, then `execute` stops Spark and the kernel in order.
        self.interrupted = True
        if self.client.km is not None:
            self._interrupting = asyncio.ensure_future(
                ensure_async(self.client.km.interrupt_kernel()))

    def _started(self, cell: NotebookNode, cell_index: int) -> None:
        if self.interrupted:  # Ctrl-C between cells: run no further cell
            raise KeyboardInterrupt
        self.current_cell = cell_index

    def describe_cell(self, index: int) -> str:
        if 0 <= index < len(self.notebook.cells):
            return f"cell {index} ({_first_line(self.notebook.cells[index])})"
        return "a cell"

    async def _count_rows(self, cell: NotebookNode, cell_index: int,
                          execute_reply: dict[str, Any]) -> None:
        if not is_sql_cell(cell) or execute_reply["content"].get("status") != "ok":
            return
        count = execute_reply["content"]["execution_count"]
        answer = await self._ask("", f"len(Out[{count}]) if {count} in Out else -1")
        text = answer.get("data", {}).get("text/plain", "")
        rows = int(text) if answer.get("status") == "ok" and text.lstrip("-").isdigit() else -1
        self.sql_rows[cell_index] = rows
        cell.metadata[ROWS_METADATA] = {"sql_rows": rows}
        if rows < 1:
            what = "no rows" if rows == 0 else "no result set"
            self.empty.append(f"{self.describe_cell(cell_index)} returned {what}")

    async def execute(self, kernel_log: Path) -> None:
        km = self.client.km
        assert km is not None
        try:
            with kernel_log.open("w") as log:
                await self.client.async_execute(env=self.kernel_env(), cwd=str(self.work_dir),
                                                stdout=log, stderr=log)
        finally:
            # The client does not own the kernel manager: stop Spark, then the kernel.
            if self.client.kc is not None:
                with contextlib.suppress(Exception):
                    if await km.is_alive():
                        await asyncio.wait_for(self._ask(_STOP_SPARK), timeout=60)
                self.client.kc.stop_channels()
            if km.has_kernel:
                await km.shutdown_kernel(now=False)


def _error_summary(exc: Exception, run: _NotebookRun) -> str:
    """One line naming the cell; the full traceback is in the executed notebook."""
    cell = run.describe_cell(run.current_cell)
    if isinstance(exc, CellExecutionError):
        first_line = (exc.evalue or "").strip().splitlines()[:1]
        detail = ": ".join([exc.ename, *first_line]) if exc.ename else "an error"
        return f"{cell} raised {detail}"
    if isinstance(exc, CellTimeoutError):
        timeout = run.settings.analysis.notebook_cell_timeout_seconds
        return f"{cell} ran longer than {timeout} s (analysis.notebook_cell_timeout_seconds)"
    if isinstance(exc, DeadKernelError):
        return "the kernel died"
    return f"{type(exc).__name__}: {exc}"


def render_html(notebook: NotebookNode, target: Path) -> Path:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(notebook)
    target.write_text(body, encoding="utf-8")
    return target


async def _run_notebook(settings: Settings, source: Path, signals: _Signals, *,
                        html: bool, docs_figure: bool) -> NotebookResult:
    """Execute one notebook; writes the executed .ipynb (and .html) to
    <state>/notebooks/ even when it fails, so the failing cell's output can be read.
    With `docs_figure`, a passing notebook's tagged figure goes to analysis.docs_figures_dir."""
    out_dir = settings.state_path / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    run = _NotebookRun(settings, source, out_dir, signals)
    result = NotebookResult(name=source.stem, source=source,
                            executed=out_dir / source.name, html=None,
                            kernel_log=out_dir / f"{source.stem}.kernel.log",
                            cells=len(run.notebook.cells))
    began = time.perf_counter()
    try:
        await run.execute(result.kernel_log)
    except Exception as exc:  # any failure is reported with the notebook named
        result.error = _error_summary(exc, run)
    finally:
        signals.release(run)
    result.seconds = round(time.perf_counter() - began, 1)
    result.sql_rows = run.sql_rows
    result.figures = len({id(cell) for cell, _ in figures_of(run.notebook)})
    problems = [*run.empty, *([result.error] if result.error else [])]
    if not problems and not run.sql_rows:
        problems.append("no %%sql cell ran")
    if not problems and not result.figures:
        problems.append("no figure (no cell drew an image/png output)")
    result.error = "; ".join(problems) or None
    nbformat.write(run.notebook, result.executed)
    if docs_figure and result.ok:
        folder = settings.project_path(settings.analysis.docs_figures_dir)
        result.docs_figure = save_docs_figure(run.notebook, folder / f"{source.stem}.png")
    if html:
        result.html = render_html(run.notebook, out_dir / f"{source.stem}.html")
    return result


def run_notebooks(settings: Settings, only: str | None, report: Report, *,
                  html: bool = True, docs_figures: bool = False) -> list[NotebookResult]:
    """Every notebook (or the one named), one kernel each, `analysis.notebook_jobs` at a
    time; the results in name order. A notebook's queries keep about one core busy (the
    driver plans and commits on one thread), so two side by side take about the time of
    the longer one on two cores. Ctrl-C interrupts every running notebook and raises
    KeyboardInterrupt once their kernels and Spark are stopped."""
    paths = notebook_paths(settings, only)
    if not paths:
        folder = settings.project_path(settings.analysis.notebooks_dir)
        raise NotebookError(f"no notebooks in {folder}")
    return asyncio.run(_run_all(settings, paths, report, html=html, docs_figures=docs_figures))


async def _run_all(settings: Settings, paths: list[Path], report: Report, *,
                   html: bool, docs_figures: bool) -> list[NotebookResult]:
    signals = _Signals()
    slots = asyncio.Semaphore(settings.analysis.notebook_jobs)

    async def one(path: Path) -> NotebookResult | None:
        async with slots:
            if signals.received:  # Ctrl-C while this one waited for a slot
                return None
            report(f"{path.stem}: running ({path})")
            result = await _run_notebook(settings, path, signals, html=html,
                                         docs_figure=docs_figures)
        rows = ", ".join(str(n) for n in result.sql_rows.values())
        state = "interrupted" if signals.received else "ok" if result.ok else "FAILED"
        report(f"{result.name}: {state} in {result.seconds:.1f} s; "
               f"{len(result.sql_rows)} SQL cells returned rows: {rows or '-'}; "
               f"{result.figures} figure(s); {result.html or result.executed}")
        if result.docs_figure is not None:
            report(f"{result.name}: docs figure written to {result.docs_figure}")
        return result

    results = await asyncio.gather(*(one(path) for path in paths))
    if signals.received:
        raise KeyboardInterrupt
    return [result for result in results if result is not None]
