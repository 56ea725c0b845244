"""Open the built docs site in headless Chromium, follow the quickstart's links, take two screenshots.

Usage: ``python tools/check_site.py SITE_DIR SCREENSHOT_DIR``. Chromium (Debian's ``chromium``) loads
``quickstart.html`` and then every page it links to inside the site, each as a user's browser
would (``file://``, the site is built with plain ``.html`` URLs); a link fails when its page is
missing, renders no ``<h1>``, or lacks the anchor it points at. Then it saves a screenshot of
the home page (``home.png``) and of one environment picture (``environment-p4de.png``) in
``SCREENSHOT_DIR``. ``make docs`` runs it; ``tests/docs/test_site.py`` runs it on the site it builds.
Exit 1 with one line per broken link.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

#: The environment whose picture is photographed.
PICTURE = "environments/p4de.svg"
#: Chromium's flags: no sandbox (tests run as root in containers), no GPU, a fixed window.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1000")
TIMEOUT_S = 120


def chromium() -> str:
    """The Chromium binary (Debian names it ``chromium``); a clear error when it is not installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("check_site: no chromium on PATH: apt-get install chromium (tests/system-packages.txt)")


class _Links(HTMLParser):
    """Every ``href`` inside the page's article, and every ``id`` in the page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self._article = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "article":
            self._article += 1
        elif tag == "a" and self._article and values.get("href"):
            self.hrefs.append(str(values["href"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._article -= 1


def dump_dom(browser: str, page: Path, profile: Path) -> str:
    """The DOM Chromium builds for ``page`` (scripts run), as HTML."""
    done = subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"check_site: chromium failed on {page}: {done.stderr.strip()[-500:]}")
    return done.stdout


def screenshot(browser: str, page: Path, out: Path, profile: Path) -> None:
    """Save a PNG of ``page`` as Chromium draws it."""
    subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={out.resolve()}", page.resolve().as_uri()],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    if not out.is_file() or out.stat().st_size == 0:
        raise SystemExit(f"check_site: chromium wrote no screenshot of {page}")


def check(site: Path, shots: Path) -> list[str]:
    """Follow the quickstart's links in ``site`` and take the screenshots; return the broken links."""
    browser = chromium()
    problems: list[str] = []
    shots.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlcluster-chromium-") as profile_dir:
        profile = Path(profile_dir)
        start = site / "quickstart.html"
        if not start.is_file():
            return [f"{start}: missing"]
        links = _Links()
        links.feed(dump_dom(browser, start, profile))
        if not links.hrefs:
            problems.append(f"{start}: Chromium found no links in the article")
        targets: dict[Path, set[str]] = {}
        for href in links.hrefs:
            parsed = urlparse(href)
            if parsed.scheme or href.startswith("//"):
                continue  # outside the site
            path, anchor = urldefrag(href)
            page = (start.parent / unquote(path)).resolve() if path else start.resolve()
            targets.setdefault(page, set()).update({anchor} if anchor else set())
        for page, anchors in sorted(targets.items()):
            if not page.is_file():
                problems.append(f"quickstart links {page.relative_to(site.resolve())}: no such page")
                continue
            if page.suffix != ".html":
                continue  # a picture or a download: its existence is the check
            seen = _Links()
            seen.feed(dom := dump_dom(browser, page, profile))
            if "<h1" not in dom:
                problems.append(f"quickstart links {page.relative_to(site.resolve())}: no heading rendered")
            problems += [
                f"quickstart links {page.relative_to(site.resolve())}#{a}: no such anchor"
                for a in sorted(anchors - seen.ids)
            ]
        screenshot(browser, site / "index.html", shots / "home.png", profile)
        screenshot(browser, site / PICTURE, shots / "environment-p4de.png", profile)
    return problems


def main(argv: list[str]) -> int:
    """``check_site.py SITE_DIR SCREENSHOT_DIR``."""
    if len(argv) != 2:
        print("usage: check_site.py SITE_DIR SCREENSHOT_DIR", file=sys.stderr)
        return 2
    problems = check(Path(argv[0]), Path(argv[1]))
    for problem in problems:
        print(f"check_site: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_site: the quickstart's links work; screenshots in {argv[1]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
