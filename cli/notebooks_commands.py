"""`lakehouse notebooks`: run the SQL notebooks headless and render them as HTML."""

from __future__ import annotations

import sys
import time

import click
from rich.markup import escape

from cli.context import settings_of
from cli.terminal import console, say


@click.command()
@click.option("--only", metavar="NAME", default=None,
              help="Run only this notebook (file name with or without .ipynb).")
@click.option("--no-html", is_flag=True, help="Skip the HTML rendering.")
@click.option("--docs-figures", is_flag=True,
              help="Also write the figure of each passing notebook's cell tagged "
                   "`docs-figure` to <analysis.docs_figures_dir>/<notebook>.png "
                   "(docs/images: the picture the README and the dbt docs site show).")
@click.pass_context
def notebooks(ctx: click.Context, only: str | None, no_html: bool, docs_figures: bool) -> None:
    """Execute the SQL notebooks of `analysis.notebooks_dir` headless.

    Each notebook runs in its own kernel (`analysis.notebook_jobs` side by side, 2 by
    default) on this project's Python with this command's
    profile and LAKEHOUSE_* overrides; the first cell builds the SparkSession on the shared
    table catalog, where every table is `<layer>.<name>` (run `lakehouse transform` first
    for the marts). The executed notebooks and their HTML go to
    <state_dir>/notebooks/, the figures inline (PNG). Exits 1 when a cell fails, a SQL
    cell returns no rows or a notebook draws no figure.

    \b
    Examples:
      lakehouse notebooks
      lakehouse notebooks --only rentals_vs_weather --no-html
      lakehouse notebooks --docs-figures     # after a backfill: refresh docs/images/
    """
    from analysis.notebooks import NotebookError, run_notebooks

    settings = settings_of(ctx)
    began = time.monotonic()
    try:
        results = run_notebooks(settings, only, say, html=not no_html,
                                docs_figures=docs_figures)
    except NotebookError as exc:
        console.print(f"[red]notebooks failed:[/red] {escape(str(exc))}")
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("interrupted: the running notebooks' kernels and Spark were stopped")
        sys.exit(130)
    failed = [r for r in results if not r.ok]
    for result in failed:
        console.print(f"[red]notebook {result.name} failed:[/red] {escape(result.error or '')}"
                      f"\n  executed notebook: {result.executed}"
                      f"\n  kernel log (Spark): {result.kernel_log}")
    summary = f"{len(results) - len(failed)}/{len(results)} notebooks ok"
    say(f"{summary} in {time.monotonic() - began:.0f} s")
    sys.exit(1 if failed else 0)
