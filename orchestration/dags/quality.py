"""Data quality, hourly: `lakehouse quality` runs the silver tables' table-level
expectation suites (expectations/); a failed expectation exits 1 and fails the task."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from lakehouse_common import START, default_args, lakehouse_task

with DAG(
    dag_id="quality",
    description="table-level expectation suites over the silver tables",
    schedule=timedelta(hours=1),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["lakehouse", "quality"],
) as dag:
    # a failed expectation is a finding, not a glitch: no retry
    lakehouse_task("expectations", "quality", retries=0,
                   execution_timeout=timedelta(minutes=30))
