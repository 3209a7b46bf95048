"""The README's quick tour, command by command, as a new user types it, on the test
profile's stack (LAKEHOUSE_PROFILE=test) and the suite's shared ingest and transform.

A command of the tour that exits non-zero fails the test; a command the README adds,
drops or changes fails it too (the first test compares the two lists), so the README and
this test change together. What each step stands on:

- `make ingest` runs until Ctrl-C; its catch-up form (`lakehouse ingest --until-caught-up`,
  which the README names for scripts) is the shared ingest the suite already ran;
- the first `make transform` is the shared transform; the tour's own is the second run:
  nothing new in `make test`, where this module runs right after the shared transform's
  (tests/conftest.py), a build where a test run before it committed to a shared table;
- `make notebooks` runs `lakehouse notebooks` after `make setup`: the notebooks module runs
  that command on the same state (three minutes, not paid twice);
- `make docs` is run as typed, until it serves, then stopped like Ctrl-C would;
- `make airflow` is tests/test_airflow.py's fixture (`lakehouse up --airflow`, Airflow started
  once for the suite), which triggers every DAG once; the SQL endpoint and `lakehouse sql`
  counting `silver.rentals` as delta-rs does are tests/test_sql_endpoint.py's.

A topic whose feed never ran (no trip file dropped) leaving `make transform` green is
tests/test_source_freshness.py's.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
import urllib.request

import psutil

from tests.conftest import PROJECT_DIR, TEST_PROFILE, TransformedLakehouse

README = PROJECT_DIR / "README.md"
# The tour as the README shows it; the value says how this test follows each command.
TOUR: dict[str, str] = {
    "make ingest": "the shared ingest (ingest --until-caught-up)",
    ".venv/bin/lakehouse status": "run",
    ".venv/bin/lakehouse kafka consume station_status --from-beginning --max-messages 3":
        "run",
    ".venv/bin/lakehouse kafka groups": "run",
    "make transform": "run (the second time)",
    "make docs": "run until it serves",
    "make notebooks":
        "tests/test_notebooks.py::"
        "test_notebooks_run_every_query_returns_rows_and_a_failing_one_is_named",
    "make airflow": "tests/test_airflow.py (up --airflow once; every DAG triggered once)",
    ".venv/bin/lakehouse up --sql-endpoint": "tests/test_sql_endpoint.py (the endpoint fixture)",
    ".venv/bin/lakehouse sql -e 'SELECT count(*) FROM silver.rentals'":
        "tests/test_sql_endpoint.py::test_beeline_counts_silver_rentals_as_delta_rs_does",
}
DEADLINE = 600.0  # seconds a step may take on a busy CI machine


def readme_tour() -> list[str]:
    """The commands of the README's "A quick tour" code blocks, comments left out."""
    section = README.read_text().split("### A quick tour", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [command for block in blocks for line in block.splitlines()
            if (command := line.split("#", 1)[0].strip())]


def test_the_tour_here_is_the_readmes() -> None:
    assert readme_tour() == list(TOUR), (
        "the README's quick tour changed: follow it in tests/test_tour.py (TOUR)")


def _environment(lakehouse: TransformedLakehouse) -> dict[str, str]:
    return {**os.environ, "LAKEHOUSE_PROFILE": TEST_PROFILE, **lakehouse.ingested.env}


def _run(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(shlex.split(command), cwd=PROJECT_DIR, env=env, text=True,
                            capture_output=True, timeout=DEADLINE, check=False)
    assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n" + (
        result.stdout + result.stderr)[-4000:]
    return result


def _serve_then_stop(command: str, env: dict[str, str], port: int) -> str:
    """Start `command` (a server until Ctrl-C), wait until it answers on `port`, then stop
    the lakehouse process under make with SIGTERM, as Ctrl-C would; its output."""
    process = subprocess.Popen(shlex.split(command), cwd=PROJECT_DIR, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}/manifest.json"
    try:
        deadline = time.monotonic() + DEADLINE
        while not _answers(url):
            assert process.poll() is None, f"`{command}` ended:\n{process.communicate()[0]}"
            assert time.monotonic() < deadline, f"`{command}`: {url} not served"
            time.sleep(1)
        server = _lakehouse_processes_under(process.pid)
        assert server, "no lakehouse process under make"
        server[0].send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, f"`{command}` exited {process.returncode}:\n{output}"
    return output


def _lakehouse_processes_under(pid: int) -> list[psutil.Process]:
    """The `lakehouse` processes among `pid`'s descendants; those that ended meanwhile
    (make's earlier steps, zombies until reaped) are left out."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:
            continue
        if "cli.main" in " ".join(command) or "lakehouse" in " ".join(command[:2]):
            found.append(child)
    return found


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def test_the_readme_tour_runs(transformed_lakehouse: TransformedLakehouse) -> None:
    env = _environment(transformed_lakehouse)
    port = transformed_lakehouse.ingested.settings.analysis.docs_port
    said: dict[str, str] = {}
    for command, how in TOUR.items():
        if how == "run until it serves":
            said[command] = _serve_then_stop(command, env, port)
        elif how.startswith("run"):
            result = _run(command, env)
            said[command] = result.stdout + result.stderr
    assert "ingest caught up in" in transformed_lakehouse.ingested.output
    assert "servers (profile test)" in said[".venv/bin/lakehouse status"]
    consume = ".venv/bin/lakehouse kafka consume station_status --from-beginning --max-messages 3"
    assert re.search(r"3 record\(s\) from \S*station_status", said[consume]), said[consume]
    # nothing new, unless an earlier test committed to a shared table (and restored it)
    assert re.search(r"nothing new since the last build|dbt build: ",
                     said["make transform"]), said["make transform"]
    assert "docs site stopped" in said["make docs"], said["make docs"]
