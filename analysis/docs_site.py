"""Serving the generated dbt docs site on loopback with the standard library.

`dbt docs generate` writes a self-contained single-page app (index.html) that fetches
manifest.json and catalog.json next to it, and copies the project's `asset-paths`
(`assets/`: the pictures the docs show) there; nothing else of dbt's target folder
(compiled SQL, run results) is served. The server runs in a background thread so tests can start and
stop it in-process; `lakehouse docs` blocks on `wait()` until Ctrl-C.
"""

from __future__ import annotations

import errno
import io
import logging
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# What `dbt docs generate` writes for the site; the only paths the server answers.
DOCS_FILES = ("index.html", "manifest.json", "catalog.json")
ASSETS_DIR = "assets"  # dbt_project.yml `asset-paths`: its files are served, flat, as well


class DocsSiteError(RuntimeError):
    """The docs cannot be served: never generated, or the port is taken."""


def missing_docs_files(target_dir: Path) -> list[str]:
    return [name for name in DOCS_FILES if not (target_dir / name).is_file()]


def is_site_file(name: str) -> bool:
    """A docs file, or a file directly in the assets folder (no subfolders, no dot files)."""
    folder, _, file = name.partition("/")
    return name in DOCS_FILES or (folder == ASSETS_DIR and file != ""
                                  and "/" not in file and not file.startswith("."))


class _DocsRequestHandler(SimpleHTTPRequestHandler):
    """GET/HEAD of the site files in `directory`; 404 for anything else (no listings)."""

    server_version = "lakehouse-docs"

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        name = unquote(urlsplit(self.path).path).lstrip("/") or "index.html"
        self.path = "/" + name
        if not is_site_file(name) or not Path(self.translate_path(self.path)).is_file():
            self.send_error(404, "not a file of the dbt docs site")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class DocsSite:
    """The docs of `target_dir` on http://127.0.0.1:<port>/, served by a background thread.

    Use as a context manager (or start/stop): the socket is always closed on exit.
    """

    def __init__(self, target_dir: Path, port: int) -> None:
        self.target_dir = target_dir
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    def bind(self) -> None:
        """Claim the port (before long work, so a taken port fails fast)."""
        if self._server is not None:
            return
        handler = partial(_DocsRequestHandler, directory=str(self.target_dir))
        try:
            self._server = ThreadingHTTPServer((LOOPBACK, self.port), handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DocsSiteError(
                    f"{LOOPBACK}:{self.port} is already in use (another `lakehouse docs`?): "
                    "pass --port or set analysis.docs_port in lakehouse.yaml") from exc
            raise DocsSiteError(f"cannot serve the docs on {LOOPBACK}:{self.port}: "
                                f"{exc}") from exc
        self._server.daemon_threads = True

    def start(self) -> DocsSite:
        missing = missing_docs_files(self.target_dir)
        if missing:
            raise DocsSiteError(
                f"no dbt docs in {self.target_dir} (missing {', '.join(missing)}): run "
                "`lakehouse docs` without --no-generate, or `lakehouse transform`")
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="dbt-docs-site", daemon=True)
        self._thread.start()
        log.info("serving %s from %s", self.url, self.target_dir)
        return self

    def wait(self) -> None:
        """Block until the server stops (in short joins, so Ctrl-C gets through)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def stop(self) -> None:
        if self._server is None:
            return
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self._server = None

    def __enter__(self) -> DocsSite:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
