"""A headless chromium, driven through the Chrome DevTools protocol over a pipe
(`--remote-debugging-pipe`: no port, no package beyond the standard library), that
opens a page and reports what went wrong on it. Debian's chromium, installed by
`sudo python3 -m course.system_packages chromium`. `course.browser_check` uses it on
every page of the course; the tests use it to step through a deck.
"""

import fcntl
import json
import os
import queue
import subprocess
import tempfile
import threading
from urllib.parse import urlsplit

CHROMIUM = "chromium"
# How long a starting chromium may take to answer its first command. Started beside the
# test suite's notebooks on 2 cores, it once took more than 30 s (612ef0f, 2026-11-27).
START_TIMEOUT = 120
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
        self.exited = False
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.send("Browser.getVersion", timeout=START_TIMEOUT)
        except BaseException:
            self.__exit__()
            raise

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
        # Chromium is gone: whatever waits for an answer gets this one, not a time-out.
        self.exited = True
        for reply in list(self.replies.values()):
            reply.put({"error": {"message": "chromium exited"}})
        self.events.put({"method": "closed"})

    def send(self, method: str, session: str | None = None, timeout=30, **params) -> dict:
        self.next_id += 1
        reply: queue.Queue = queue.Queue()
        self.replies[self.next_id] = reply
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        if self.exited:  # checked after the reply is registered: see _read
            raise RuntimeError(f"{method}: chromium exited")
        try:
            os.write(self._from_us, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"{method}: chromium exited") from None
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

    def open(self, url: str, expression: str, timeout: float = 60) -> tuple[list[str], object]:
        """Load `url` in a fresh tab; return its problems (see `describe`) and the value
        of the JavaScript `expression` once it has loaded."""
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
