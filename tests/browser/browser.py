"""Headless Chromium for tests: open a page, collect console errors, take screenshots.

Shared by the report tests and the web-app tests. It drives the system Chromium (Debian package
``chromium``; no browser download) through Playwright for Python.

    from browser import open_page, require_chromium

    def test_page(tmp_path):
        require_chromium()                    # skips (locally) or fails (CI=true) without Chromium
        with open_page(path_or_url) as page:  # a Playwright Page; console errors are collected
            page.wait_for_selector(".js-plotly-plot")
            page.screenshot(path=...)
        assert page.console_errors == []

``page.console_errors`` lists console messages of type ``error``, uncaught page exceptions and
failed requests; ``page.requests`` lists every URL the page asked for (so a test can assert that
an offline report makes no network request).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
#: where screenshots go (git-ignored)
ARTIFACTS = REPO / "test-artifacts"
#: where Chromium is looked for, in order (``TRACEVIEW_CHROMIUM`` overrides)
CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
#: flags that work in containers and CI (no sandbox, no GPU, nothing that phones home)
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def chromium_path() -> str | None:
    override = os.environ.get("TRACEVIEW_CHROMIUM")
    if override:
        return override if Path(override).exists() else None
    for candidate in CANDIDATES:
        if Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


def require_chromium() -> str:
    """The Chromium executable; without it, fail in CI (``CI=true``) and skip elsewhere."""
    reason = None
    path = chromium_path()
    if path is None:
        reason = "Chromium is not installed (apt-get install -y chromium chromium-driver)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "the playwright package is not installed (pip install -e '.[test]')"
    if reason:
        if in_ci():
            pytest.fail(f"{reason}; CI must run the browser tests")
        pytest.skip(reason)
    return path  # type: ignore[return-value]


@contextlib.contextmanager
def serve_app(app: object, name: str) -> Iterator[str]:
    """Serve a Dash ``app`` (``traceview.app.server.create_app``) on a free local port from a thread;
    yields its base URL and stops the server on exit."""
    import threading

    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app.server, threaded=True)  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        thread.join(timeout=10)


@contextlib.contextmanager
def open_page(target: str | os.PathLike[str], *, width: int = 1400, height: int = 1000,
              timeout_ms: int = 60_000) -> Iterator["object"]:
    """Open ``target`` (a file path or URL) in a fresh headless Chromium; yields the Page.

    The page gets ``console_errors`` and ``requests`` attributes (lists) that keep filling while
    it is open.
    """
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    url = str(target)
    if "://" not in url:
        url = Path(url).resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="traceview-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=executable, headless=True, args=LAUNCH_ARGS,
                viewport={"width": width, "height": height}, timeout=timeout_ms,
            )
            try:
                page = context.new_page()
                page.set_default_timeout(timeout_ms)
                errors: list[str] = []
                requests: list[str] = []
                page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}")
                        if msg.type == "error" else None)
                page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
                # with Chromium's reason (net::ERR_ABORTED: the page navigated away while it was in flight)
                page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url} ({req.failure})"))
                page.on("request", lambda req: requests.append(req.url))
                page.console_errors = errors  # type: ignore[attr-defined]
                page.requests = requests  # type: ignore[attr-defined]
                page.goto(url, wait_until="load")
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(page: "object", name: str, *, full_page: bool = True) -> Path:
    """Save a PNG of the page under ``test-artifacts/`` and return its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)  # type: ignore[attr-defined]
    return path
