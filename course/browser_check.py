"""Open the rendered course in a real headless browser and report what went wrong.

    .venv/bin/python -m course.build
    .venv/bin/python -m course.browser_check            # build/html, the site and decks

Every `.html` page under the folder (the site's pages, each slide deck) is
served by a local web server on 127.0.0.1 (a free port) and opened in Debian's
chromium (`sudo python3 -m course.system_packages chromium`), driven through the Chrome
DevTools protocol over a pipe (`--remote-debugging-pipe`: no port, no package beyond the
standard library). A page fails when, by the time chromium reports it loaded and the network
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
import fcntl
import functools
import http.server
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from course.system_packages import INSTALL_COMMAND, program

CHROMIUM = "chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",  # root has no user namespace sandbox
    "--disable-gpu",
    "--no-first-run",
    # Without these, chromium calls Google's hosts at start (refused offline).
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]
# What the page links to, the ids it has (where links may point), and its images that
# did not decode (a broken data: URI, or an animation whose script never set its frame).
AFTER_LOAD = """({
  links: Array.from(document.links, a => a.href),
  ids: Array.from(document.querySelectorAll("[id]"), element => element.id),
  broken_images: Array.from(document.images)
    .filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => img.src.slice(0, 80)),
})"""


class Browser:
    """A headless chromium and one DevTools session to it; use as a context manager."""

    def __init__(self, executable: str = CHROMIUM):
        self.profile = tempfile.TemporaryDirectory(prefix="browser-check-")
        to_browser, self._from_us = os.pipe()
        self._to_us, from_browser = os.pipe()

        def as_fds_3_and_4():  # where --remote-debugging-pipe reads and writes
            read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 5) for fd in (to_browser, from_browser))
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # our pipes are non-inheritable; only fds 3 and 4 pass
            preexec_fn=as_fds_3_and_4,
        )
        os.close(to_browser)
        os.close(from_browser)
        self.next_id = 0
        self.replies: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffered = b""
        with os.fdopen(self._to_us, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                buffered += chunk
                *messages, buffered = buffered.split(b"\0")
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self.replies[message["id"]].put(message)
                    else:
                        self.events.put(message)
        self.events.put({"method": "closed"})

    def send(self, method: str, session: str | None = None, timeout=30, **params) -> dict:
        self.next_id += 1
        reply: queue.Queue = queue.Queue()
        self.replies[self.next_id] = reply
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._from_us, json.dumps(message).encode() + b"\0")
        try:
            answer = reply.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"chromium did not answer {method} within {timeout} s") from None
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.send("Browser.close", timeout=10)
            self.process.wait(timeout=10)
        except (OSError, TimeoutError, RuntimeError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        os.close(self._from_us)
        self.profile.cleanup()

    def open(
        self, url: str, expression=AFTER_LOAD, timeout: float = 60
    ) -> tuple[list[str], object]:
        """Load `url` in a fresh tab; return its problems and the value of the
        JavaScript `expression` once loaded (default: its links and broken images)."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session)
        self.send("Page.setLifecycleEventsEnabled", session, enabled=True)
        while not self.events.empty():  # what came before this page is not its own
            self.events.get()
        loader = self.send("Page.navigate", session, url=url).get("loaderId")
        problems, requests, seen = [], {}, set()
        while {"load", "networkIdle"} - seen:
            try:
                event = self.events.get(timeout=timeout)
            except queue.Empty:
                problems.append(f"did not finish loading within {timeout:g} s")
                break
            if event.get("sessionId") != session:
                if event["method"] == "closed":
                    problems.append("chromium exited")
                    break
                continue
            method, params = event["method"], event.get("params", {})
            # Lifecycle events of about:blank, the tab's first page, may come late.
            if method == "Page.lifecycleEvent" and params.get("loaderId") == loader:
                seen.add(params["name"])  # only "load" and "networkIdle" matter
            problem = describe(method, params, requests, url)
            if problem:
                problems.append(problem)
        value = self.send(
            "Runtime.evaluate",
            session,
            timeout=timeout,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,  # an expression may wait for the page (a search)
            userGesture=True,  # as if a reader pressed the keys it presses
        )
        if "exceptionDetails" in value:
            details = value["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            problems.append(f"the check's own script failed: {text.splitlines()[0]}")
        self.send("Target.closeTarget", targetId=target)
        return problems, value["result"].get("value")


def describe(method: str, params: dict, requests: dict, page_url: str) -> str | None:
    """One line for an event that is a problem, else None."""
    if method == "Network.requestWillBeSent":
        url = params["request"]["url"]
        requests[params["requestId"]] = url
        host = urlsplit(url).hostname
        if url.startswith(("http:", "https:", "ws:", "wss:")) and host not in (
            "127.0.0.1",
            "localhost",
        ):
            return f"fetches from the network: {url}"
    elif method == "Network.responseReceived":
        status = params["response"]["status"]
        # /favicon.ico is the browser's own guess, not something the page asked for.
        if status >= 400 and urlsplit(params["response"]["url"]).path != "/favicon.ico":
            return f"missing resource: {params['response']['url']} (HTTP {status})"
    elif method == "Network.loadingFailed" and not params.get("canceled"):
        url = requests.get(params["requestId"], "?")
        return f"resource failed to load: {url} ({params['errorText']})"
    elif method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        text = details.get("exception", {}).get("description") or details.get("text")
        line = details.get("lineNumber", -1) + 1
        return f"JavaScript exception: {text.splitlines()[0]} (line {line})"
    elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        text = " ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"])
        return f"console error: {text}"
    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
        entry = params["entry"]
        # Failed loads are reported above already, with their address.
        if entry.get("source") != "network":
            return f"console error: {entry['text']}"
    return None


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
                problems, found = browser.open(base + name)
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


def why_no_chromium() -> str | None:
    """None when chromium is installed, else one line saying how to install it."""
    if program(CHROMIUM):
        return None
    return f"chromium is not installed: install it with `{INSTALL_COMMAND} chromium`"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("build/html"))
    parser.add_argument("--chromium", default=CHROMIUM, help="the browser to run")
    args = parser.parse_args()
    if shutil.which(args.chromium) is None:
        sys.exit(f"{args.chromium} not found: install it with `{INSTALL_COMMAND} chromium`")
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
