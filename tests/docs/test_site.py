"""Tier 5: the manual builds in strict mode, and reads right in a real browser.

`mkdocs build --strict` fails on a broken link, a missing image, a missing anchor or a message of the code
with no explanation on the troubleshooting page. Then headless Chromium (Debian's `chromium` package; `make
docs-test` installs it when it is missing and the user is root) opens the built site from a local web server,
follows the navigation from the front page until it has reached every page, checks that every image on every
page loaded, and saves a screenshot of the front page (`.test-results/docs-front-page.png`) to look at.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import cdp  # noqa: E402

SHOT = ROOT / ".test-results" / "docs-front-page.png"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert run.returncode == 0, "the strict docs build failed:\n" + "\n".join(warnings or [run.stderr[-3000:]])
    return out


def test_strict_build(site: Path) -> None:
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ("index.html", "troubleshooting.html", "panel.html", "design/solvers.html"):
        assert page in pages, f"{page} was not built (pages: {sorted(pages)})"


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[cdp.Browser]:
    executable = cdp.find_chromium()
    if executable is None:
        pytest.skip("no Chromium: install Debian's chromium package (`make docs-test` does, as root)")
    b = cdp.Browser(executable)
    yield b
    b.close()


NAV_LINKS = "[...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')].map(a => a.href)"
IMAGES = "[...document.images].map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0}))"


def test_every_page_reachable_and_every_image_loads(site: Path, server: str, browser: cdp.Browser) -> None:
    expected = {p.relative_to(site).as_posix() for p in site.rglob("*.html")} - {"404.html"}
    seen: set[str] = set()
    broken: list[str] = []
    queue = ["index.html"]
    images = 0
    while queue:
        page = queue.pop(0)
        if page in seen:
            continue
        seen.add(page)
        browser.open(urljoin(server, page))
        for image in browser.evaluate(IMAGES):
            images += 1
            if not image["ok"]:
                broken.append(f"{page}: {image['src']}")
        for href in browser.evaluate(NAV_LINKS):
            url = urlparse(href)
            if url.netloc == urlparse(server).netloc:
                target = url.path.lstrip("/") or "index.html"
                if target.endswith(".html") and target not in seen:
                    queue.append(target)
    assert not broken, "images that did not load:\n" + "\n".join(broken)
    assert images >= 10, f"only {images} images on the whole site"
    missing = expected - seen
    assert not missing, f"pages the navigation does not reach from the front page: {sorted(missing)}"
    browser.open(urljoin(server, "index.html"))
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.screenshot(SHOT)
    print(f"front page: {SHOT}")
