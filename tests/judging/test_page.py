"""The judging page in real headless Chromium, by keyboard only, over `dotcat serve --judge`.

Each key grades the document on screen when it is pressed, whatever the pace: the page moves
on at once and saves in the background, one request at a time, each named by the page load
and a number so that a repeat or a late one changes nothing. Checked against what a listener
of our own saw on screen at each key press, not against what the page says it did.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from tests.judging.conftest import WORDS
from tests.serve.conftest import free_port
from tests.serve.test_page import CHROMIUM_ARGS, _chromium
from tests.timing import within

from dotcat.judging import JudgmentStore, PoolConfig, QrelsConfig, Topic, build_pool, judged_qrels

#: A process that has imported dotcat once and forks a `dotcat serve` for each line it reads
#: (the command's arguments, tab-separated), printing its pid: a server (re)started in a second
#: or two, not the 10 to 60 s a new Python spends importing torch on a loaded 2-core machine.
#: It forks from a process with one thread (forking the test process, which runs Playwright's
#: threads, left a child locked) and reaps nothing: SIGCHLD ignored, the kernel does.
_ZYGOTE = """
import os, signal, sys
from dotcat.cli import app
import dotcat.search.pipeline, dotcat.serve.server  # what `dotcat serve` imports when it runs
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            app(line.rstrip("\\n").split("\\t"))
        finally:
            os._exit(0)
    print(pid, flush=True)
"""
#: What was on screen at each key press: (key, query, "id DOC" or "" when no document was).
_WATCH = """
window.pressed = [];
window.addEventListener("keydown", (event) => {
  const shown = document.getElementById("doc-id");
  window.pressed.push([event.key, document.getElementById("topic").value,
                       shown ? shown.textContent : "", performance.now()]);
}, true);
"""
_PRESSED = "[window.pressed.splice(0), document.getElementById('doc-id').textContent]"
#: Keys sent inside the page, each ``gaps[i]`` ms (0-5) after the page has handled the one
#: before: as fast as it takes keys (on a quiet 2-core Zen 3 a median 5.6-6.0 ms apart, 90th
#: percentile 14-15 ms), where Playwright's keyboard waits for each key's round trip to the
#: browser (13-16 ms). Between keys the page runs its other tasks (the answers of saves): a
#: MessageChannel message is not clamped to 4 ms as a nested timer is.
_BURST = """async ([keys, gaps]) => {
  const channel = new MessageChannel();
  const other = () => new Promise((done) => {
    channel.port1.onmessage = done;
    channel.port2.postMessage(0);
  });
  for (let i = 0; i < keys.length; i++) {
    const until = performance.now() + gaps[i];
    do { await other(); } while (performance.now() < until);
    document.dispatchEvent(new KeyboardEvent("keydown", {key: keys[i], bubbles: true}));
  }
}"""
_SETTLED = """() => document.querySelector('#doc').getAttribute('aria-busy') === 'false'
    && document.querySelector('#alert').hidden
    && !/Saving|not saved/.test(document.querySelector('#status').textContent)"""


class Zygote:
    """:data:`_ZYGOTE`, running until the block ends."""

    def __enter__(self) -> Zygote:
        self.process = subprocess.Popen([sys.executable, "-c", _ZYGOTE], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        return self

    def fork(self, argv: list[str]) -> int:
        self.process.stdin.write("\t".join(argv) + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()  # holds nothing; its servers are stopped by their tests
        self.process.wait(timeout=60)


@pytest.fixture(scope="session")
def zygote():
    """Started first (a test names it before the index it builds): it imports meanwhile."""
    _chromium()  # skipped without a browser: no process started for nothing
    with Zygote() as started:
        yield started


class Server:
    """`dotcat serve INDEX --judge` on ``port``, as its command line runs it, forked by
    ``zygote``: SIGKILL ends it with nothing flushed; started again, it keeps the port."""

    def __init__(self, zygote: Zygote, index, store, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.pid = zygote.fork(["serve", str(index), "--judge", "--judgments", str(store),
                                "--port", str(port), "--device", "cpu", "--precision", "fp32",
                                "--no-access-log"])  # fmt: skip
        deadline = time.monotonic() + within(300)  # a loaded machine: slow, not hung
        while not self._answers():
            if not self.running() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("dotcat serve --judge did not start")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def running(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _signal(self, number: int) -> None:
        if self.running():
            os.kill(self.pid, number)
        deadline = time.monotonic() + within(60)
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _pool(pipeline, path, topics, depth: int) -> dict[str, list[str]]:
    """A judgements file with ``topics`` pooled; each query's documents in judging order."""
    with JudgmentStore(path, pipeline.index_dir, create=True) as store:
        build_pool(pipeline, store, topics, PoolConfig(pool_depth=depth))
        return {t.qid: [e.doc_id for e in store.pooled(t.qid)] for t in store.topics()}


def _start(page, url: str) -> None:
    """Open the page, type the assessor's name, Enter: the first document to judge shows."""
    page.add_init_script(_WATCH)
    page.goto(f"{url}/judge")
    page.wait_for_selector("#assessor:focus")
    page.keyboard.type("ann")
    page.keyboard.press("Enter")
    page.wait_for_selector("#doc-text .passage")
    page.evaluate("window.pressed.length = 0")


def _settle(page) -> None:
    """Wait until every grade is saved and the page is not loading."""
    try:
        page.wait_for_function(_SETTLED, timeout=within(60) * 1000)
    except Exception:
        print(page.inner_text("#status"), "|", page.inner_text("#alert"))
        raise


def _standing(store_path) -> dict[tuple[str, str], int | None]:
    with JudgmentStore(store_path) as store:
        return {(j.qid, j.doc_id): j.grade for j in store.current("ann")}


def test_the_page_says_what_is_true_by_keyboard(
    zygote, browser, judge_index, judge_pipeline, topics_file, tmp_path
):
    """`0123 0123` typed with no pause grades the first eight documents in order; the status
    line never claims a query judged before it is; `]` waits for the next query, then grades
    it; `]` on the last query wraps and says so; undo; a finished query shows no document, so
    a key too many changes nothing."""
    from dotcat.judging import read_topics

    store_path = tmp_path / "judgments.sqlite"
    order = _pool(judge_pipeline, store_path, read_topics(topics_file), depth=8)
    server = Server(zygote, judge_index, store_path, free_port())
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        _start(page, server.url)
        _type_ahead(page, order, store_path)
        _wrap_and_undo(page, order)
        _finish_a_query(page, order, store_path)
    finally:
        server.stop()


def _type_ahead(page, order: dict, store_path) -> None:
    assert "judged" not in page.inner_text("#status")  # at 0 of the pool
    assert page.inner_text("#topic-progress") == f"0/{len(order['q1'])} judged"
    page.keyboard.type("01230123")  # the burst: no pause at all
    _settle(page)
    grades = dict(zip(order["q1"], [0, 1, 2, 3] * 2, strict=False))
    assert _standing(store_path) == {("q1", d): g for d, g in grades.items()}
    assert page.inner_text("#topic-progress") == f"8/{len(order['q1'])} judged"
    assert "judged" not in page.inner_text("#status")
    page.keyboard.type("]2")  # the 2 waits for q2, then grades its first document
    _settle(page)
    assert _standing(store_path)[("q2", order["q2"][0])] == 2
    assert page.locator("#doc-id").inner_text() == f"id {order['q2'][1]}"


def _wrap_and_undo(page, order: dict) -> None:
    page.keyboard.type("]]")  # past the last query: back to the first, said
    page.wait_for_selector("#status:has-text('That was the last query: back to the first, q1.')")
    assert page.locator("#topic").input_value() == "q1"
    page.keyboard.press("u")  # withdraws q2's grade, and shows that document
    page.wait_for_selector(f"#status:has-text('Undone: {order['q2'][0]} graded 2.')")
    assert page.locator("#topic").input_value() == "q2"
    assert page.locator("#doc-id").inner_text() == f"id {order['q2'][0]}"


def _finish_a_query(page, order: dict, store_path) -> None:
    page.keyboard.press("]")
    page.wait_for_function("() => document.querySelector('#topic').value === 'q3'")
    _settle(page)
    page.keyboard.type("1" * len(order["q3"]))
    _settle(page)
    assert page.inner_text("#doc-title") == "Every document of this query is judged."
    assert page.inner_text("#doc-id") == ""
    assert "Every document of this query is judged" in page.inner_text("#status")
    page.keyboard.press("3")  # a key too many: no document on screen, nothing graded
    assert "No document on screen" in page.inner_text("#status")
    _settle(page)
    standing = _standing(store_path)
    assert [standing[("q3", d)] for d in order["q3"]] == [1] * len(order["q3"])
    assert len(standing) == 8 + len(order["q3"])  # q2's grade undone
    total = sum(len(docs) for docs in order.values())
    assert page.inner_text("#overall") == f"ann: {len(standing)} of {total} judged · 3 queries"
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


#: The keys of a burst, drawn at random: grades mostly, a skip, a look back or ahead.
BURST_KEYS = "0123" * 5 + "s" + "np"
KEYS = 1000
#: After how many keys the server is killed (SIGKILL), and started again on its port.
EVENTS = [(300, "kill"), (400, "start"), (650, "kill"), (750, "start")]


def _burst_topics() -> list[Topic]:
    rng = random.Random(11)
    return [Topic(f"b{i}", " ".join(rng.sample(WORDS, 3))) for i in range(36)]


def _intended(pressed: list, log: list) -> int:
    """Add to ``log`` (the grades as the store should hold them, in order) what the keys
    ``pressed`` meant: a grade or a skip of the document on screen; undo withdraws the latest
    grade; a key with no document on screen, nothing. Returns how many grades were given."""
    given = 0
    for key, qid, shown, _ in pressed:
        if key == "u":
            log.pop()
        elif shown and key in "0123s":
            log.append((qid, shown.removeprefix("id "), None if key == "s" else int(key)))
            given += 1
    return given


def _type_bursts(page, rng, servers: list, serve: tuple) -> tuple[list, int, dict]:
    """Type :data:`KEYS` keys in bursts, half by Playwright's keyboard, half sent in the page
    (:data:`_BURST`), killing and starting the server (the last of ``servers``) at
    :data:`EVENTS`; the grades meant, how many were given, the key spacing of each way.
    Between bursts, sometimes (and whenever a query is done) `]` or `u`, if the server is up."""
    log: list[tuple[str, str, int | None]] = []
    given, typed, events = 0, 0, list(EVENTS)
    spacing: dict[str, list[float]] = {"keyboard": [], "in the page": []}
    while typed < KEYS:
        keys = "".join(rng.choice(BURST_KEYS) for _ in range(rng.randint(5, 30)))[: KEYS - typed]
        way = rng.choice(list(spacing))
        if way == "keyboard":
            page.keyboard.type(keys, delay=rng.randint(0, 5))
        else:
            page.evaluate(_BURST, [keys, [rng.uniform(0, 5) for _ in keys]])
        typed += len(keys)
        pressed, shown = page.evaluate(_PRESSED)
        burst = [at for *_, at in pressed[-len(keys) :]]  # not the `]` or `u` before it
        spacing[way] += [b - a for a, b in zip(burst, burst[1:], strict=False)]
        given += _intended(pressed, log)
        if servers[-1].running() and (not shown or rng.random() < 0.25):
            page.keyboard.press("u" if log and rng.random() < 0.3 else "]")
            page.wait_for_selector("#doc[aria-busy='false']")
        while events and typed >= events[0][0]:
            if events.pop(0)[1] == "kill":
                servers[-1].kill()  # requests in flight, likely
            else:
                _banner_in_view(page)
                servers.append(Server(*serve))
    given += _intended(page.evaluate(_PRESSED)[0], log)
    return log, given, spacing


def _banner_in_view(page) -> None:
    page.wait_for_selector("#alert:has-text('Not saved')")
    box = page.locator("#alert").bounding_box()
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= 900


def test_a_thousand_keys_in_bursts_land_on_the_documents_shown_through_two_kills(
    zygote, browser, judge_index, judge_pipeline, tmp_path
):
    """1,000 keys in random bursts, 0-5 ms apart (half sent in the page, half by the keyboard,
    which cannot go faster than about 12 ms a key), the server killed (SIGKILL) twice midway and
    started again on its port while keys are typed: the export holds exactly the grades the
    keys gave to the documents on screen, each stored once; while the server is down, the
    failure is a banner in view. (About half the keys grade a document; the others move, or
    fall on a query with none left to grade, where they must grade nothing.)"""
    rng = random.Random(64)
    store_path = tmp_path / "judgments.sqlite"
    _pool(judge_pipeline, store_path, _burst_topics(), depth=30)
    serve = (zygote, judge_index, store_path, free_port())
    servers = [Server(*serve)]
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        _start(page, servers[0].url)
        log, given, spacing = _type_bursts(page, rng, servers, serve)
        _settle(page)
        overall = page.inner_text("#overall")
    finally:
        servers[-1].stop()
    for way, gaps in spacing.items():
        gaps.sort()
        median, p90 = gaps[len(gaps) // 2], gaps[len(gaps) * 9 // 10]
        print(f"{KEYS} keys, {given} grades; {way}: {len(gaps)} gaps, median {median:.1f} ms, "
              f"90th percentile {p90:.1f} ms")  # fmt: skip
    standing = {(q, d): g for q, d, g in log}
    with JudgmentStore(store_path) as store:
        assert len(store.log()) == given  # each grade stored once: no repeat, none lost
        assert {(j.qid, j.doc_id): j.grade for j in store.current("ann")} == standing
        qrels = judged_qrels(store, QrelsConfig(assessor="ann"))
    intended: dict[str, dict[str, int]] = {}
    for (qid, doc), grade in standing.items():
        if grade is not None:
            intended.setdefault(qid, {})[doc] = grade
    assert qrels == intended
    assert re.match(rf"ann: {sum(map(len, intended.values()))} of \d+ judged", overall)
