"""The analysis layer, hourly: `lakehouse transform` (dbt build of models, tests and
snapshots, source freshness, docs). One task: astronomer-cosmos would need dbt in
Airflow's virtualenv, whose pins clash with the project's."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from lakehouse_common import START, default_args, lakehouse_task

with DAG(
    dag_id="transform",
    description="dbt build, source freshness and docs over the lakehouse tables",
    schedule=timedelta(hours=1),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["lakehouse", "dbt"],
) as dag:
    lakehouse_task("transform", "transform", execution_timeout=timedelta(hours=1))
