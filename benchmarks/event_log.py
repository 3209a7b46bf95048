"""`python -m benchmarks.event_log FILE`: where a Spark driver's time went, per SQL execution
and per job, from Spark's event log.

A micro-batch's seconds hide a dozen Spark jobs (a small Delta MERGE alone runs about
thirteen, the table's state rebuilt from its log among them). Run any command or
benchmark with the event log on, through the environment, e.g.

    env LAKEHOUSE_SPARK__CONF__spark.eventLog.enabled=true \\
        LAKEHOUSE_SPARK__CONF__spark.eventLog.dir=file:///tmp/spark-events \\
        make bench BENCH=silver_batch

then point this at the file written there (plain or zstd-compressed, Spark 4's default).
Each line: start (seconds after the first shown), duration, the execution's id, its root
(a MERGE's inner executions share the MERGE's), the jobs it ran and the first nodes of its
physical plan, which say what it was (`Scan json` of `_delta_log`: the table's state
rebuilt; `MergeIntoCommand`; `SortMergeJoin FullOuter`: a MERGE writing its changes).
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass
class Execution:
    """One SQL execution of the log and the jobs it ran (times in epoch milliseconds)."""

    id: int
    root: int
    description: str
    plan: str
    start: int
    end: int | None = None
    jobs: list[int] = field(default_factory=list)  # job durations, ms

    @property
    def ms(self) -> int | None:
        return None if self.end is None else self.end - self.start


def events(path: Path) -> Iterator[dict]:
    """The log's events, decompressed when Spark compressed it."""
    with path.open("rb") as raw:
        compressed = raw.read(4) == ZSTD_MAGIC
        raw.seek(0)
        stream = zstandard.ZstdDecompressor().stream_reader(raw) if compressed else raw
        for line in io.TextIOWrapper(stream, encoding="utf-8"):
            if line.strip():
                yield json.loads(line)


def _plan_head(description: str, nodes: int = 4) -> str:
    """The plan's tree, top nodes only (its node details follow, each line starting "(")."""
    tree = []
    for line in description.splitlines():
        if line.startswith("("):
            break
        if line.strip() and not line.startswith("=="):
            tree.append(line.strip(" +-:*"))
    return " / ".join(tree[:nodes])


def executions(log: Iterable[dict]) -> list[Execution]:
    """SQL executions in start order, each with its jobs' durations."""
    found: dict[int, Execution] = {}
    job_execution: dict[int, tuple[int, int]] = {}  # job id -> (execution id, start)
    for event in log:
        kind = event["Event"]
        if kind.endswith("SparkListenerSQLExecutionStart"):
            number = int(event["executionId"])
            found[number] = Execution(
                number, int(event.get("rootExecutionId", number)),
                event.get("description", "").splitlines()[0][:60] if event.get("description")
                else "", _plan_head(event.get("physicalPlanDescription", "")),
                int(event["time"]))
        elif kind.endswith("SparkListenerSQLExecutionEnd"):
            if int(event["executionId"]) in found:
                found[int(event["executionId"])].end = int(event["time"])
        elif kind == "SparkListenerJobStart":
            execution = event.get("Properties", {}).get("spark.sql.execution.id")
            if execution is not None:
                job_execution[event["Job ID"]] = (int(execution), int(event["Submission Time"]))
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in job_execution:
            number, started = job_execution.pop(event["Job ID"])
            if number in found:
                found[number].jobs.append(int(event["Completion Time"]) - started)
    return sorted(found.values(), key=lambda e: (e.start, e.id))


def report(chosen: list[Execution]) -> list[str]:
    if not chosen:
        return ["no SQL executions in the log"]
    first = chosen[0].start
    return [f"{(e.start - first) / 1000:8.3f} s {e.ms if e.ms is not None else '?':>6} ms "
            f"#{e.id} root #{e.root} jobs {len(e.jobs)} ({sum(e.jobs)} ms) "
            f"{e.description} | {e.plan}" for e in chosen]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.event_log",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="an event log file Spark wrote")
    parser.add_argument("--root", type=int, action="append",
                        help="only this execution and those inside it (repeatable)")
    parser.add_argument("--last", type=int, default=0,
                        help="only the last N root executions and what ran inside them")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        parser.error(f"{args.file}: no such file (Spark writes its event logs under "
                     "spark.eventLog.dir)")
    found = executions(events(args.file))
    roots = args.root or []
    if args.last:
        roots += sorted({e.root for e in found})[-args.last:]
    chosen = [e for e in found if not roots or e.root in roots]
    print("\n".join(report(chosen)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
