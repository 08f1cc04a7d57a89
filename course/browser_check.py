"""Open the rendered course in a real headless browser and report what went wrong.

    .venv/bin/python -m course.build
    .venv/bin/python -m course.browser_check            # build/html, the site and decks

Every `.html` page under the folder (the site's pages, each slide deck) is
served by a local web server on 127.0.0.1 (a free port) and opened in Debian's
chromium (`sudo python3 -m course.system_packages chromium`), driven by Playwright
(`executable_path`: Playwright downloads no browser of its own).
A page fails when, by the time chromium reports it loaded and the network
idle, it has:

- a resource that did not load (an image, script or style sheet: HTTP 4xx/5xx or a
  network error), or any request to a host other than this one (the course must open
  offline);
- an uncaught JavaScript exception, or a console error;
- a link to a page of the course that is not there, or to a place in a page (`#id`)
  that the page does not have: every link of every page is followed this way, the
  sidebar's, the next/previous links and the in-page contents included.

Then it runs one search on the site's search page (when there is one) and fails if
it finds nothing. It prints one line per problem and exits non-zero if there is any.
"""

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import Error, sync_playwright

from course.system_packages import INSTALL_COMMAND, program

CHROMIUM = "chromium"
# How long a starting chromium may take: started beside the test suite's notebooks on 2
# cores, it has taken more than 30 s.
START_TIMEOUT = 120
LOCAL_HOSTS = ("127.0.0.1", "localhost")


class Browser:
    """Debian's headless chromium, driven by Playwright; use as a context manager."""

    def __init__(self, executable: str = CHROMIUM):
        self.playwright = sync_playwright().start()
        try:
            self.browser = self.playwright.chromium.launch(
                executable_path=program(executable) or executable,
                timeout=START_TIMEOUT * 1000,
            )
        except BaseException:
            self.playwright.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.browser.close()
        finally:
            self.playwright.stop()

    def open(self, url: str, expression: str, timeout: float = 60) -> tuple[list[str], object]:
        """Load `url` in a fresh tab; return its problems and the value of the JavaScript
        `expression` (awaited, when it is a promise) once the page has loaded and the
        network is idle."""
        problems: list[str] = []
        page = self.browser.new_page()

        def fetched(url: str) -> None:
            host = urlsplit(url).hostname
            if url.startswith(("http:", "https:", "ws:", "wss:")) and host not in LOCAL_HOSTS:
                problems.append(f"fetches from the network: {url}")

        def answered(response) -> None:
            # /favicon.ico is the browser's own guess, not something the page asked for.
            if response.status >= 400 and urlsplit(response.url).path != "/favicon.ico":
                problems.append(f"missing resource: {response.url} (HTTP {response.status})")

        def failed(request) -> None:
            if request.failure != "net::ERR_ABORTED":  # not a load the page cancelled
                problems.append(f"resource failed to load: {request.url} ({request.failure})")

        def console(message) -> None:
            # Chromium's own line for a failed load: reported above, with its address.
            if message.type in ("error", "assert") and not message.text.startswith(
                "Failed to load resource"
            ):
                problems.append(f"console error: {message.text}")

        def thrown(error) -> None:
            lines = (error.stack or f"{error.name}: {error.message}").splitlines()
            where = f" ({lines[1].strip()})" if len(lines) > 1 else ""  # the innermost frame
            problems.append(f"JavaScript exception: {lines[0]}{where}")

        page.on("request", lambda request: fetched(request.url))
        page.on("websocket", lambda socket: fetched(socket.url))
        page.on("response", answered)
        page.on("requestfailed", failed)
        page.on("console", console)
        page.on("pageerror", thrown)
        page.on("crash", lambda _: problems.append("the page crashed"))
        value = None
        try:
            page.goto(url, wait_until="load", timeout=timeout * 1000)
            page.wait_for_load_state("networkidle", timeout=timeout * 1000)
        except Error as error:
            problems.append(f"did not finish loading: {first_line(error)}")
        try:
            value = page.evaluate(expression)
        except Error as error:
            problems.append(f"the check's own script failed: {first_line(error)}")
        page.close()
        return problems, value


def first_line(error: Error) -> str:
    """Playwright's message without the name of the call and the browser's log."""
    return error.message.split(": ", 1)[-1].splitlines()[0]


# What the page links to, the ids it has (where links may point), and its images that
# did not decode (a broken data: URI, or an animation whose script never set its frame).
AFTER_LOAD = """({
  links: Array.from(document.links, a => a.href),
  ids: Array.from(document.querySelectorAll("[id]"), element => element.id),
  broken_images: Array.from(document.images)
    .filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => img.src.slice(0, 80)),
})"""


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A web server for `folder` on 127.0.0.1, on a free port, in a thread."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def check(folder: Path, pages: list[Path] | None = None, executable: str = CHROMIUM) -> dict:
    """Open each page (default: every .html under `folder`, the index first), follow
    every link, and run a search if there is a search page.
    Returns {page relative to folder: [problems]}."""
    folder = folder.resolve()
    if pages is None:
        # Not the theme's own templates in _static/, nor the page sources in _sources/.
        pages = [p for p in folder.rglob("*.html") if not p.relative_to(folder).parts[0][0] == "_"]
        pages.sort(key=lambda p: (p.name != "index.html", p))
    server, base = serve(folder)
    results, ids, links = {}, {}, {}
    try:
        with Browser(executable) as browser:
            for page in pages:
                name = page.resolve().relative_to(folder).as_posix()
                problems, found = browser.open(base + name, AFTER_LOAD)
                problems += [f"image did not load: {src}" for src in found["broken_images"]]
                results[name], ids[name], links[name] = problems, set(found["ids"]), found["links"]
            if (folder / "search.html").exists():
                results[f"search.html?q={SEARCH_FOR}"] = search(browser, base)
    finally:
        server.shutdown()
        server.server_close()
    for name, found in links.items():
        results[name] += broken_links(found, base, folder, ids)
    return results


def broken_links(links: list[str], base: str, folder: Path, ids: dict) -> list[str]:
    """The links to a page of the course that is not there, or to an `#id` that the
    page (when it was opened) does not have."""
    problems = []
    for link in dict.fromkeys(links):  # each once, in order
        target = urlsplit(link)
        path = target.path.lstrip("/") or "index.html"
        if not link.startswith(base) or not path.endswith(".html"):
            continue
        if not (folder / path).exists():
            problems.append(f"broken link: {path}")
        elif target.fragment and path in ids and target.fragment not in ids[path]:
            problems.append(f"broken link: {path}#{target.fragment} (no such place)")
    return problems


# A word every lesson's text has: the search must find pages for it.
SEARCH_FOR = "all_reduce"
SEARCH = """new Promise(done => {
  const waited = Date.now();
  (function look() {
    const results = document.querySelectorAll("#search-results ul.search li a");
    const finished = document.querySelector("#search-results p.search-summary");
    if (finished || Date.now() - waited > 20000) {
      done(Array.from(results, a => a.getAttribute("href")));
    } else {
      setTimeout(look, 100);
    }
  })();
})"""


def search(browser: Browser, base: str) -> list[str]:
    """Search the site for SEARCH_FOR as a reader would; the problems, if any."""
    problems, hits = browser.open(f"{base}search.html?q={SEARCH_FOR}", expression=SEARCH)
    if not hits:
        problems.append(f"the search for {SEARCH_FOR} found no page")
    return problems


def why_no_chromium(executable: str = CHROMIUM) -> str | None:
    """None when the browser is installed, else one line saying how to install it."""
    if program(executable):
        return None
    return f"{executable} is not installed: install it with `{INSTALL_COMMAND} chromium`"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("build/html"))
    parser.add_argument("--chromium", default=CHROMIUM, help="the browser to run")
    args = parser.parse_args()
    if reason := why_no_chromium(args.chromium):
        sys.exit(reason)
    if not (args.folder / "index.html").exists():
        sys.exit(f"no {args.folder}/index.html: build the course first (python -m course.build)")
    results = check(args.folder, executable=args.chromium)
    for page, problems in results.items():
        print(f"{'FAIL' if problems else 'ok  '}  {page}")
        for problem in problems:
            print(f"      {problem}")
    failed = sum(bool(problems) for problems in results.values())
    print(f"\n{len(results) - failed} of {len(results)} pages loaded cleanly")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
