"""The SQL notebooks: committed without outputs; `lakehouse notebooks` executes them over the
shared transformed lakehouse, every query returns rows, HTML is rendered; a notebook with an
empty query and a failing query makes the command fail, naming the notebook and cells."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from analysis.notebooks import ROWS_METADATA, is_sql_cell
from settings import Settings
from tests.conftest import PROJECT_DIR, TransformedLakehouse, run_cli

NOTEBOOKS_DIR = PROJECT_DIR / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def _outputs_dir(settings: Settings) -> Path:
    return settings.state_path / "notebooks"


def _clear_outputs(settings: Settings, names: list[str]) -> None:
    """Executed notebooks and HTML of an earlier run must not satisfy this one."""
    for name in names:
        for suffix in (".ipynb", ".html"):
            (_outputs_dir(settings) / f"{name}{suffix}").unlink(missing_ok=True)


def test_committed_notebooks_have_no_outputs() -> None:
    assert {p.stem for p in NOTEBOOKS} >= {"station_availability", "rentals_vs_weather"}
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert sum(is_sql_cell(c) for c in code) >= 3, f"{path.name}: too few %%sql cells"
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{path.name} cell {index} has outputs"
                assert cell.execution_count is None, f"{path.name} cell {index} was run"
                assert ROWS_METADATA not in cell.metadata, f"{path.name} cell {index}"


def test_notebooks_run_and_every_query_returns_rows(
        transformed_lakehouse: TransformedLakehouse, settings: Settings) -> None:
    names = [p.stem for p in NOTEBOOKS]
    _clear_outputs(settings, names)
    result = run_cli("notebooks", env=transformed_lakehouse.ingested.env, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert f"{len(names)}/{len(names)} notebooks ok" in output

    for path in NOTEBOOKS:
        source = nbformat.read(path, as_version=4)
        executed = nbformat.read(_outputs_dir(settings) / path.name, as_version=4)
        assert len(executed.cells) == len(source.cells)
        sql_cells = [(i, c) for i, c in enumerate(executed.cells) if is_sql_cell(c)]
        assert len(sql_cells) == sum(is_sql_cell(c) for c in source.cells)
        for index, cell in sql_cells:
            where = f"{path.name} cell {index}"
            assert cell.metadata[ROWS_METADATA]["sql_rows"] >= 1, where
            tables = [o for o in cell.outputs if o.output_type == "execute_result"
                      and "<td>" in o.data.get("text/html", "")]
            assert tables, f"{where}: no result table in the output"
        errors = [o for c in executed.cells for o in c.get("outputs", [])
                  if o.output_type == "error"]
        assert not errors
        html = (_outputs_dir(settings) / f"{path.stem}.html").read_text()
        assert "<table" in html and source.cells[0].source.splitlines()[0].lstrip("# ") in html


@pytest.fixture
def broken_notebooks(tmp_path: Path) -> Path:
    """A notebook with the committed setup cell, one query that returns no rows, one that
    fails (unknown table) and one that works."""
    setup = next(c for c in nbformat.read(NOTEBOOKS[0], as_version=4).cells
                 if c.cell_type == "code")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(setup.source),
        nbformat.v4.new_code_cell("%%sql\nSELECT station_id\n"
                                  "FROM marts.dim_station WHERE 1 = 0"),
        nbformat.v4.new_code_cell("%%sql\nSELECT * FROM marts.no_such_table"),
        nbformat.v4.new_code_cell("%%sql\nSELECT count(*) AS n FROM marts.dim_station"),
    ]
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(notebook, folder / "broken_queries.ipynb")
    return folder


def test_failing_notebook_names_the_notebook_and_cells(
        transformed_lakehouse: TransformedLakehouse, settings: Settings,
        broken_notebooks: Path) -> None:
    _clear_outputs(settings, ["broken_queries"])
    env = {**transformed_lakehouse.ingested.env,
           "LAKEHOUSE_ANALYSIS__NOTEBOOKS_DIR": str(broken_notebooks)}
    result = run_cli("notebooks", "--only", "broken_queries", "--no-html", env=env,
                     timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-6000:]
    assert "notebook broken_queries failed" in output
    assert "cell 1 (%%sql) returned no rows" in output
    assert "cell 2 (%%sql) raised" in output and "no_such_table" in output.lower()
    executed = nbformat.read(_outputs_dir(settings) / "broken_queries.ipynb", as_version=4)
    assert executed.cells[1].metadata[ROWS_METADATA]["sql_rows"] == 0
    assert executed.cells[3].outputs == []  # execution stopped at the failing cell
    assert not (_outputs_dir(settings) / "broken_queries.html").exists()
