"""`python -m benchmarks.event_log`: a Spark event log read back into SQL executions and
their jobs, plain or zstd-compressed as Spark 4 writes it by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from benchmarks.event_log import events, executions, main

SQL = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecution"
PLAN = ("== Physical Plan ==\nExecute MergeIntoCommand (1)\n+- MergeIntoCommand (2)\n\n"
        "(1) Execute MergeIntoCommand\nOutput [4]: [num_affected_rows]\n")
STATE = ("== Physical Plan ==\nAdaptiveSparkPlan (9)\n+- Sort (4)\n   +- Scan json  (1)\n\n"
         "(1) Scan json\n")
LOG = [
    {"Event": f"{SQL}Start", "executionId": 7, "rootExecutionId": 7,
     "description": "silver_rentals\nid = 1", "physicalPlanDescription": PLAN, "time": 1000},
    {"Event": f"{SQL}Start", "executionId": 8, "rootExecutionId": 7,
     "description": "Delta: Compute snapshot for version: 12",
     "physicalPlanDescription": STATE, "time": 1100},
    {"Event": "SparkListenerJobStart", "Job ID": 3, "Submission Time": 1150,
     "Properties": {"spark.sql.execution.id": "8"}},
    {"Event": "SparkListenerJobEnd", "Job ID": 3, "Completion Time": 1400},
    {"Event": f"{SQL}End", "executionId": 8, "time": 1450},
    {"Event": f"{SQL}End", "executionId": 7, "time": 3500},
    {"Event": f"{SQL}Start", "executionId": 9, "rootExecutionId": 9, "description": "count",
     "physicalPlanDescription": "== Physical Plan ==\nLocalTableScan (1)\n", "time": 3600},
]


@pytest.fixture(params=["plain", "zstd"])
def log_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    text = "".join(json.dumps(event) + "\n" for event in LOG).encode()
    path = tmp_path / "events_1_local-1"
    path.write_bytes(zstandard.ZstdCompressor().compress(text)
                     if request.param == "zstd" else text)
    return path


def test_executions_carry_their_root_jobs_and_plan(log_file: Path) -> None:
    found = executions(events(log_file))
    assert [(e.id, e.root, e.ms, e.jobs) for e in found] == [
        (7, 7, 2500, []), (8, 7, 350, [250]), (9, 9, None, [])]
    assert found[0].plan == "Execute MergeIntoCommand (1) / MergeIntoCommand (2)"
    assert found[1].description == "Delta: Compute snapshot for version: 12"


def test_last_root_shows_only_what_ran_inside_it(log_file: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(log_file), "--root", "7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "#8 root #7 jobs 1 (250 ms)" in lines[1] and "Scan json" in lines[1]
    assert main([str(log_file), "--last", "1"]) == 0
    assert "#9 root #9" in capsys.readouterr().out
