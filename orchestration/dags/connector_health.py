"""Kafka Connect health, every 5 minutes: check every connector and task; if one FAILED,
restart the failed instances, then check again. The run fails (the alert) when a connector
stays failed; a check that failed and recovered shows red on its own task only."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from lakehouse_common import START, default_args, lakehouse_task

with DAG(
    dag_id="connector_health",
    description="Kafka Connect connector and task states; restart failed tasks",
    schedule=timedelta(minutes=5),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args={**default_args(), "retries": 0},
    tags=["lakehouse", "kafka-connect"],
) as dag:
    check = lakehouse_task("check", "connectors status")
    restart = lakehouse_task("restart_failed", "connectors restart --all --failed-only",
                             trigger_rule="all_failed")
    recheck = lakehouse_task("recheck", "connectors status")
    check >> restart >> recheck
