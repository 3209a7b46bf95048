"""Airflow schedules the periodic work: the project starts a real Airflow (`lakehouse up
--airflow`) next to the test stack; every DAG imports, each scrape DAG runs on its source
file's interval, a scrape DAG triggered through the REST API puts records in the topic,
one whose feed is down is retried and then failed, the UI (headless Chromium) shows the
DAGs with their last run's state (screenshot under the state folder's test-output), the
transform DAG rebuilds the marts of the shared ingest and the quality, connector-health
and maintenance DAGs each succeed once (Airflow is started once, with
that ingest's settings: its tasks run `lakehouse` with the environment Airflow started
with)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable
from playwright.sync_api import expect, sync_playwright

from analysis.build_inputs import BuildRecord
from analysis.dbt_project import DbtPaths
from clients import kafka_admin, kafka_config
from connectors.scrapers.source_config import load_sources
from connectors.simulator.server import FeedSimulator
from infra import airflow_env
from infra.ports import port_is_free
from infra.stack import Stack
from lakehouse.storage import storage_options
from settings import Settings
from tests.conftest import IngestedLakehouse, catalog_location, run_cli, still_running
from tests.test_docs_site import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from tests.test_transform import MARTS as ALL_MARTS
from tests.test_transform import mart_keys

# Fast failure for the tests: one retry a second later, no HTTP retries in the scraper;
# topics and scraper state of their own (a fresh prefix: the records counted are this
# module's, and the session's shared ingest still finds every snapshot new).
RUN = uuid.uuid4().hex[:8]
TOPIC_PREFIX = f"af{RUN}."
AIRFLOW_ENV = {"LAKEHOUSE_AIRFLOW__RETRIES": "1",
               "LAKEHOUSE_AIRFLOW__RETRY_DELAY_SECONDS": "1",
               "LAKEHOUSE_SCRAPER__RETRIES": "0",
               "LAKEHOUSE_SCRAPER__STATE_DIR": f"scrapers-airflow-{RUN}",
               "LAKEHOUSE_KAFKA__TOPIC_PREFIX": TOPIC_PREFIX}
OTHER_DAGS = {"transform", "maintenance", "quality", "connector_health"}
RUN_DEADLINE = 300.0
# seconds the scheduler gets to add a due run once unpaused, before the test triggers one
SCHEDULED_RUN_WAIT = 20.0
MARTS = ("dim_station", "fct_rentals_daily")


class AirflowApi:
    """Airflow's REST API v2 with a token of the admin user (simple auth manager)."""

    def __init__(self, settings: Settings) -> None:
        self.url = airflow_env.api_url(settings)
        answer = requests.post(f"{self.url}/auth/token", timeout=30, json={
            "username": settings.airflow.admin_user,
            "password": airflow_env.admin_password(settings)})
        assert answer.status_code in (200, 201), answer.text
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {answer.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.session.request(method, f"{self.url}/api/v2{path}", timeout=30, **kwargs)
        assert answer.ok, f"{method} {path}: {answer.status_code} {answer.text[:500]}"
        return answer.json()

    def dag_ids(self) -> set[str]:
        return {d["dag_id"] for d in self.call("GET", "/dags", params={"limit": 100})["dags"]}

    def run(self, dag_id: str, deadline_seconds: float = RUN_DEADLINE) -> dict[str, Any]:
        """Unpause `dag_id`, wait until one run of it ends, pause it again; that run.

        When the DAG's next scheduled run is due, unpausing makes the scheduler add it
        (catchup off still runs that one) and the test takes it; otherwise the test
        triggers one. Never two at once: the run under test is the first new one to leave
        the queue (one active run at a time), and any other new run is marked failed while
        it is still queued. Marking a running one failed left its task running beside the
        next run's: two `lakehouse transform` builds, two `lakehouse quality` runs at once
        on two cores."""
        before = self._latest_runs(dag_id)
        for old in before:  # left queued by an earlier session: would start first
            if old["state"] == "queued":
                self._fail(dag_id, old["dag_run_id"])
        before_ids = {r["dag_run_id"] for r in before}
        due = self._scheduled_run_due(dag_id)
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        try:
            began = time.monotonic()
            chosen: str | None = None if due else self._trigger(dag_id)
            while time.monotonic() - began < deadline_seconds:
                new = [r for r in self._latest_runs(dag_id) if r["dag_run_id"] not in before_ids]
                if chosen is None:
                    chosen = next((r["dag_run_id"] for r in new if r["state"] != "queued"),
                                  None)
                if chosen is None and not new \
                        and time.monotonic() - began > SCHEDULED_RUN_WAIT:
                    chosen = self._trigger(dag_id)
                for other in new:
                    if chosen is not None and other["dag_run_id"] != chosen \
                            and other["state"] == "queued":
                        self._fail(dag_id, other["dag_run_id"])
                run = next((r for r in new if r["dag_run_id"] == chosen), None)
                if run is not None and run["state"] in ("success", "failed"):
                    return run
                time.sleep(1)
            raise AssertionError(f"{dag_id}: no run ended within {deadline_seconds:.0f} s "
                                 f"(run under test: {chosen})")
        finally:
            self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def _fail(self, dag_id: str, run_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})

    def _trigger(self, dag_id: str) -> str:
        return self.call("POST", f"/dags/{dag_id}/dagRuns",
                         json={"logical_date": None})["dag_run_id"]

    def _scheduled_run_due(self, dag_id: str) -> bool:
        """Whether the scheduler adds a run as soon as the DAG is unpaused."""
        due = self.call("GET", f"/dags/{dag_id}").get("next_dagrun_run_after")
        return due is not None and datetime.fromisoformat(due) <= datetime.now(UTC)

    def _latest_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's 20 newest runs, any state."""
        return self.call("GET", f"/dags/{dag_id}/dagRuns",
                         params={"order_by": "-id", "limit": 20})["dag_runs"]

    def task(self, run: dict[str, Any], task_id: str) -> dict[str, Any]:
        return self.call("GET", f"/dags/{run['dag_id']}/dagRuns/{run['dag_run_id']}"
                                f"/taskInstances/{task_id}")


def _airflow_components(settings: Settings) -> list:
    return [c for c in Stack(settings).components if c.name.startswith("airflow-")]


@pytest.fixture(scope="module")
def airflow(stack: Stack, settings: Settings,
            ingested_lakehouse: IngestedLakehouse) -> Iterator[AirflowApi]:
    """Airflow started once by the project on the running test stack, with the shared
    ingest's tables and catalog (the transform DAG builds its marts) and this module's
    topics; stopped after the module by `down --airflow` (every process of it gone, its
    port free, the other servers left running)."""
    for component in _airflow_components(settings):  # one left by an earlier session runs
        component.stop()                              # with other settings: start afresh
    result = run_cli("up", "--airflow", env={**AIRFLOW_ENV, **ingested_lakehouse.env},
                     timeout=600)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"[-4000:]
    components = _airflow_components(settings)
    pids = [pid for c in components if (pid := c.process.pid()) is not None]
    assert len(pids) == 4, [c.name for c in components]
    try:
        yield AirflowApi(settings)
    finally:
        pids = [pid for c in components if (pid := c.process.pid()) is not None]  # restarts
        others = {c.name: c.process.pid() for c in stack.components
                  if not c.name.startswith("airflow-") and c.process.pid() is not None}
        result = run_cli("down", "--airflow", timeout=300)  # Airflow alone
        assert result.returncode == 0, result.stderr
        alive = [p for p in pids if still_running(p)]
        assert not alive, f"Airflow processes left running: {alive}"
        assert port_is_free(settings.embedded.airflow_port)
        assert {c.name: c.process.pid() for c in stack.components
                if c.name in others} == others, "down --airflow stopped another server"


def _wait_for_dags(api: AirflowApi, expected: set[str], timeout: float = 180) -> set[str]:
    """The DAG ids once every expected one is parsed (the DAG processor's first pass)."""
    deadline = time.monotonic() + timeout
    found: set[str] = set()
    while time.monotonic() < deadline:
        found = api.dag_ids()
        if expected <= found:
            return found
        time.sleep(1)
    raise AssertionError(f"DAGs missing after {timeout:.0f} s: {sorted(expected - found)}")


def test_every_dag_imports_and_each_scrape_dag_follows_its_source_file(
        airflow: AirflowApi, settings: Settings) -> None:
    sources = load_sources(settings)
    every_file = load_sources(settings, include_disabled=True)
    expected = {f"scrape_{s.name}" for s in sources} | OTHER_DAGS
    found = _wait_for_dags(airflow, expected)
    errors = airflow.call("GET", "/importErrors")
    assert errors["total_entries"] == 0, errors
    disabled = {f"scrape_{s.name}" for s in every_file} - expected
    assert not disabled & found, f"disabled sources got a DAG: {disabled & found}"
    for source in sources:
        details = airflow.call("GET", f"/dags/scrape_{source.name}/details")
        assert details["timetable_summary"] == str(
            timedelta(seconds=source.spec.interval_seconds)), (source.path, details)
        assert details["catchup"] is False
        assert details["max_active_runs"] == 1
        assert details["default_args"]["retries"] == 1  # the setting, from AIRFLOW_ENV


def _end_offsets(settings: Settings, topic: str) -> int:
    """Records ever written to `topic` (0 while it does not exist)."""
    found = kafka_admin(settings).list_topics(timeout=10).topics.get(topic)
    if found is None:
        return 0
    consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in found.partitions)
    finally:
        consumer.close()


def test_triggered_scrape_dag_succeeds_and_records_arrive_in_the_topic(
        airflow: AirflowApi, settings: Settings) -> None:
    _wait_for_dags(airflow, {"scrape_lakeside_gbfs"})
    topic = TOPIC_PREFIX + "station_status"
    before = _end_offsets(settings, topic)
    with FeedSimulator(port=settings.simulator.port, host=settings.simulator.host,
                       seed=settings.simulator.seed):
        run = airflow.run("scrape_lakeside_gbfs")
    assert run["state"] == "success", (run, airflow.task(run, "scrape"))
    assert _end_offsets(settings, topic) > before


def test_scrape_dag_with_its_feed_down_is_retried_then_failed(
        airflow: AirflowApi, settings: Settings) -> None:
    _wait_for_dags(airflow, {"scrape_lakeside_weather"})
    assert port_is_free(settings.simulator.port), "the feed must be down for this test"
    run = airflow.run("scrape_lakeside_weather")
    task = airflow.task(run, "scrape")
    assert run["state"] == "failed", run
    assert task["state"] == "failed", task
    assert task["try_number"] == 2, task  # the first try and the one retry of AIRFLOW_ENV


def test_ui_login_shows_the_dags_with_their_last_run_state(
        airflow: AirflowApi, settings: Settings) -> None:
    """After the runs above: the DAG list, each scrape DAG's latest run badge as the REST
    API has that run."""
    sources = load_sources(settings)
    dags = sorted({f"scrape_{s.name}" for s in sources} | OTHER_DAGS)
    output_dir = settings.state_path / "test-output"
    output_dir.mkdir(parents=True, exist_ok=True)
    screenshot = output_dir / "airflow_dags.png"
    screenshot.unlink(missing_ok=True)
    badges: dict[str, tuple[str, str | None]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{airflow.url}/dags")
            page.get_by_label("Username").fill(settings.airflow.admin_user)
            page.get_by_label("Password").fill(airflow_env.admin_password(settings))
            page.get_by_role("button", name="Sign in").click()
            for dag in dags:
                expect(page.locator(f'a[data-testid="dag-id"][href="/dags/{dag}"]')
                       ).to_have_text(dag, timeout=60_000)
            for source in sources:
                dag = f"scrape_{source.name}"
                link = page.locator(f'[data-testid="latest-run"] a[href^="/dags/{dag}/runs/"]')
                expect(link).to_be_visible(timeout=30_000)
                badge = link.locator('[data-testid="state-badge"]')
                badges[dag] = (unquote(link.get_attribute("href") or "").rsplit("/", 1)[1],
                               badge.get_attribute("aria-label"))
            page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    print(f"Airflow UI screenshot: {screenshot}")
    for dag, (run_id, state) in badges.items():
        assert state in ("success", "failed"), (dag, run_id, state)
        assert airflow.call("GET", f"/dags/{dag}/dagRuns/{run_id}")["state"] == state
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, len(png)


def _last_commit_ms(settings: Settings, name: str) -> int:
    uri = catalog_location(settings, name)
    table = DeltaTable(uri, storage_options=storage_options(settings, uri))
    stamp = int(table.history(1)[0]["timestamp"])
    del table
    return stamp


def test_transform_dag_rebuilds_the_marts(airflow: AirflowApi,
                                          ingested_lakehouse: IngestedLakehouse) -> None:
    _wait_for_dags(airflow, {"transform"})
    # The task must build, not find nothing new since an earlier test's build: forget that
    # build's record, as a new commit to an input would.
    settings = ingested_lakehouse.settings
    paths = DbtPaths.of(settings)
    BuildRecord(paths.target_dir.parent / "last_build.json").forget()
    before = {name: mart_keys(settings, name) for name in ALL_MARTS}
    began_ms = int(time.time() * 1000)
    run = airflow.run("transform", deadline_seconds=1200)
    assert run["state"] == "success", (run, airflow.task(run, "transform"))
    for mart in MARTS:
        assert _last_commit_ms(settings, f"marts.{mart}") >= began_ms, mart
    # the inputs are those of the last build: a full build gives every mart the same rows
    # (the incremental mart's merge finds nothing new)
    assert {name: mart_keys(settings, name) for name in ALL_MARTS} == before


@pytest.mark.parametrize("dag_id", ["quality", "connector_health", "maintenance"])
def test_each_periodic_dag_succeeds_on_the_shared_ingest(airflow: AirflowApi,
                                                         dag_id: str) -> None:
    """Each of the other DAGs, triggered once, succeeds with every task on the shared
    ingest's tables and connectors (the suites pass, no connector failed, maintenance
    finds every table)."""
    _wait_for_dags(airflow, {dag_id})
    run = airflow.run(dag_id, deadline_seconds=900)
    tasks = airflow.call("GET", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")
    states = {t["task_id"]: t["state"] for t in tasks["task_instances"]}
    assert run["state"] == "success", (run, states)
    expected = {"connector_health": {"check": "success", "restart_failed": "skipped",
                                     "recheck": "skipped"}}
    assert states == expected.get(dag_id, {t: "success" for t in states}), states
    assert states, f"{dag_id} ran no task"
