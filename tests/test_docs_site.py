"""The dbt docs site: the server answers only the docs files, on 127.0.0.1 only, and fails
clearly without docs or on a taken port; `lakehouse docs --no-generate` over the shared
transformed lakehouse renders the model list and the lineage Kafka -> bronze -> silver ->
marts in headless Chromium (Debian's, driven by Playwright), saved as a screenshot."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from playwright.sync_api import Page, expect, sync_playwright

from analysis.dbt_project import DbtPaths
from analysis.docs_site import DOCS_FILES, LOOPBACK, DocsSite, DocsSiteError
from infra.ports import port_is_free
from settings import Settings
from tests.conftest import PROJECT_DIR, TEST_PROFILE, TransformedLakehouse

# Playwright's own browser download is unreachable here: Debian's chromium (installed by
# `lakehouse setup`). Without the background-networking flags its connections are refused.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1600, "height": 1000}
MARTS = {"dim_station", "fct_rentals_daily", "fct_station_status_observations",
         "fct_station_availability_hourly"}
LINEAGE_MART = "fct_rentals_daily"
# The notebook figure the overview shows (committed under docs/images, dbt/assets links there)
FIGURE = "assets/rentals_vs_weather.png"
# The sidebar's Project tab (the Database and Group tabs hold the same nodes, hidden).
PROJECT_TREE = """model-tree div.menu[ng-show="nav_selected == 'project'"]"""

# unique_id of every node of the sidebar tree that is displayed.
SHOWN_TREE_NODES = """() => Array.from(
    document.querySelectorAll('model-tree a.menu-node[data-nav-unique-id]'))
  .filter(a => a.offsetParent !== null).map(a => a.dataset.navUniqueId)"""
# The lineage as cytoscape drew it: cytoscape keeps its instance on its container element.
RENDERED_GRAPH = """() => {
  for (const el of document.querySelectorAll('*')) {
    if (!(el._cyreg && el._cyreg.cy) || el.clientWidth === 0) continue;
    const cy = el._cyreg.cy;
    const nodes = cy.nodes().filter(n => n.visible());
    return {width: el.clientWidth, height: el.clientHeight,
            nodes: nodes.map(n => ({id: n.id(), box: n.renderedBoundingBox()})),
            edges: cy.edges().filter(e => e.visible())
                     .map(e => [e.source().id(), e.target().id()])};
  }
  return null;
}"""


def _docs_files(folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"index.html": b"<html><title>dbt Docs</title></html>",
             "manifest.json": b'{"nodes": {}}', "catalog.json": b'{"nodes": {}}'}
    for name, body in files.items():
        (folder / name).write_bytes(body)
    return files


def _get(port: int, path: str) -> tuple[int, bytes]:
    """A raw request: `path` goes out exactly as written (no client-side normalisation)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _listening_addresses(port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_docs_figure_is_committed_small_and_shown() -> None:
    """The overview's figure is a real PNG, small enough for the repository, and the
    README shows the same file."""
    png = (PROJECT_DIR / "dbt" / FIGURE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(png) < 150_000, len(png)
    overview = (PROJECT_DIR / "dbt" / "models" / "overview.md").read_text()
    assert f"]({FIGURE})" in overview
    assert "](docs/images/rentals_vs_weather.png)" in (PROJECT_DIR / "README.md").read_text()


def test_refuses_to_serve_without_generated_docs(tmp_path: Path, settings: Settings) -> None:
    port = settings.analysis.docs_port
    (tmp_path / "index.html").write_text("half a site")
    with pytest.raises(DocsSiteError) as error, DocsSite(tmp_path, port):
        pass
    message = str(error.value)
    assert str(tmp_path) in message and "manifest.json, catalog.json" in message
    assert "index.html" not in message.split("missing")[1]
    assert port_is_free(port)


def test_serves_only_the_docs_files_on_loopback(tmp_path: Path, settings: Settings) -> None:
    target = tmp_path / "target"
    files = _docs_files(target)
    (target / "run_results.json").write_text("{}")  # dbt's, not part of the site
    (target / "compiled").mkdir()
    (target / "assets" / "nested").mkdir(parents=True)  # dbt's copy of the asset-paths
    (target / "assets" / "figure.png").write_bytes(b"\x89PNG a figure")
    (target / "assets" / ".hidden").write_text("a dot file")
    (tmp_path / "secret.txt").write_text("outside the target folder")
    port = settings.analysis.docs_port
    with DocsSite(target, port) as site:
        assert site.url == f"http://127.0.0.1:{port}/"
        assert _listening_addresses(port) == {"127.0.0.1"}
        for name, body in files.items():
            assert _get(port, f"/{name}?cb=1") == (200, body)
        assert _get(port, "/") == (200, files["index.html"])
        assert _get(port, "/assets/figure.png") == (200, b"\x89PNG a figure")
        for path in ("/run_results.json", "/compiled/", "/../secret.txt",
                     "/%2e%2e/secret.txt", "/index.html/", "/nothing", "/assets/",
                     "/assets/nested", "/assets/.hidden", "/assets/../secret.txt",
                     "/assets/%2e%2e/%2e%2e/secret.txt", "/assets/missing.png"):
            status, _ = _get(port, path)
            assert status == 404, path
    assert port_is_free(port)


def test_taken_port_is_a_clear_error(tmp_path: Path, settings: Settings) -> None:
    port = settings.analysis.docs_port
    _docs_files(tmp_path)
    with socket.socket() as blocker:
        # As the server does: a connection of an earlier test may linger in TIME_WAIT.
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind((LOOPBACK, port))
        blocker.listen()
        with pytest.raises(DocsSiteError, match=f"127.0.0.1:{port} is already in use"):
            DocsSite(tmp_path, port).start()


@pytest.fixture
def served_docs(transformed_lakehouse: TransformedLakehouse) -> Iterator[str]:
    """`lakehouse docs --no-generate` as a user runs it, stopped with SIGTERM afterwards."""
    settings = transformed_lakehouse.ingested.settings
    target = DbtPaths.of(settings).target_dir
    assert not [n for n in DOCS_FILES if not (target / n).is_file()], "transform wrote no docs"
    port = settings.analysis.docs_port
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "docs", "--no-generate"],
        cwd=PROJECT_DIR, env={**os.environ, **transformed_lakehouse.ingested.env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_until_served(process, url)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert f"dbt docs site at {url}" in output and "docs site stopped" in output, output
    assert port_is_free(port)


def _wait_until_served(process: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        try:
            with urllib.request.urlopen(url + "manifest.json", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} not served within 60 s")


def _project_name() -> str:
    project = yaml.safe_load((PROJECT_DIR / "dbt" / "dbt_project.yml").read_text())
    return project["name"]


def _path_to(edges: list[list[str]], start: str, goal: str) -> list[str] | None:
    """A path along the drawn edges from `start` to `goal` (depth first)."""
    children: dict[str, list[str]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
    stack = [[start]]
    while stack:
        path = stack.pop()
        if path[-1] == goal:
            return path
        stack += [[*path, child] for child in children.get(path[-1], []) if child not in path]
    return None


def _open_folder(page: Page, name: str) -> None:
    page.locator(f"{PROJECT_TREE} a.menu-tree").filter(has_text=name).first.click()


def test_docs_site_renders_model_list_and_lineage(
        served_docs: str, transformed_lakehouse: TransformedLakehouse) -> None:
    project = _project_name()
    marts = {f"model.{project}.{name}" for name in MARTS}
    mart = f"model.{project}.{LINEAGE_MART}"
    kafka = f"source.{project}.kafka."
    output_dir = transformed_lakehouse.ingested.settings.state_path / "test-output"
    output_dir.mkdir(parents=True, exist_ok=True)
    screenshot = output_dir / "docs_lineage.png"
    screenshot.unlink(missing_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(served_docs + "index.html")
            expect(page).to_have_title("dbt Docs")
            # The overview's notebook figure: dbt's asset-paths, served next to the site.
            page.wait_for_function(f"""() => {{
                const img = document.querySelector('img[src="{FIGURE}"]');
                return img !== null && img.complete && img.naturalWidth > 300; }}""")
            expect(page.locator("model-tree")).to_contain_text("Sources")

            # The model list: the Kafka sources and the marts folder, opened as a user would.
            for folder in ("kafka", project, "models", "marts"):
                _open_folder(page, folder)
            mart_entry = page.locator(f'{PROJECT_TREE} a[data-nav-unique-id="{mart}"]')
            expect(mart_entry).to_be_visible()
            shown = set(page.evaluate(SHOWN_TREE_NODES))
            assert marts <= shown, sorted(shown)
            assert any(node.startswith(kafka) for node in shown), sorted(shown)

            # The lineage: the mart's page, its lineage graph, then full screen (+mart+).
            mart_entry.click()
            expect(page.get_by_role("heading", name=LINEAGE_MART)).to_be_visible()
            page.locator('a[title="View Lineage Graph"]').click()
            page.locator('a[title="View Fullscreen"][ng-click="showExpanded()"]').click()
            page.wait_for_function(
                f"() => {{ const g = ({RENDERED_GRAPH})();"
                f" return g && g.width > 1000 && g.nodes.some(n => n.id.startsWith('{kafka}')); }}")
            graph = page.evaluate(RENDERED_GRAPH)
            page.mouse.move(VIEWPORT["width"] / 2, 120)  # no tooltip over the graph
            page.screenshot(path=str(screenshot))
        finally:
            browser.close()

    ids = {node["id"] for node in graph["nodes"]}
    assert mart in ids, sorted(ids)
    sources = sorted(node for node in ids if node.startswith(kafka))
    assert sources, sorted(ids)
    path = next(filter(None, (_path_to(graph["edges"], s, mart) for s in sources)), None)
    assert path is not None, graph["edges"]
    names = [node.rsplit(".", 1)[1] for node in path]
    assert names[1].startswith("bronze_") and names[2].startswith("silver_"), path
    for node in graph["nodes"]:  # drawn inside the graph's canvas, not collapsed
        box = node["box"]
        assert box["w"] > 0 and box["h"] > 0, node
        assert box["x1"] >= -1 and box["x2"] <= graph["width"] + 1, (node, graph["width"])
        assert box["y1"] >= -1 and box["y2"] <= graph["height"] + 1, (node, graph["height"])

    print(f"docs lineage screenshot: {screenshot}")
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000, len(png)
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"])
