"""One scrape DAG per enabled scraper source file (connectors/sources/*.yaml), on the
file's interval_seconds. A retry is safe: the scraper skips a snapshot it already
produced, and its producer is idempotent."""

from __future__ import annotations

from airflow.sdk import DAG
from lakehouse_common import START, default_args, lakehouse_task, scrape_sources

for source in scrape_sources():
    with DAG(
        dag_id=f"scrape_{source.name}",
        description=source.description or f"scrape {source.name}",
        doc_md=f"Runs `lakehouse scrape --once --source {source.name}`; schedule and feed "
               f"from `{source.path}`.",
        schedule=source.interval,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=default_args(),
        tags=["lakehouse", "scrape"],
    ) as dag:
        lakehouse_task("scrape", f"scrape --once --source {source.name}")
    globals()[dag.dag_id] = dag
