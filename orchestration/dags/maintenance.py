"""Table maintenance, daily: `lakehouse maintain` (OPTIMIZE, Z-ORDER and VACUUM as each
table definition in lakehouse/tables/ says). Exit 1 when a table failed: the task fails."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from lakehouse_common import START, default_args, lakehouse_task

with DAG(
    dag_id="maintenance",
    description="OPTIMIZE / Z-ORDER / VACUUM per table definition",
    schedule=timedelta(days=1),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["lakehouse", "delta"],
) as dag:
    lakehouse_task("maintain", "maintain", execution_timeout=timedelta(hours=2))
