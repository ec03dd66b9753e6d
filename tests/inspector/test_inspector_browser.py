"""The inspector in a real browser: Playwright driving Debian's Chromium against a store
filled by replaying a bundled trajectory. Screenshots are kept in the test's tmp folder, and
the one of a session is copied to docs/images/inspector.png for the README.

Chromium comes from ``make browser`` (apt, as root, when missing); without it these tests
skip, and fail under ``CONTEXTFOLD_REQUIRE_ALL=1``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module, skip_or_fail

require_module("starlette")
require_module("uvicorn")
sync_api = require_module("playwright.sync_api")

from contextfold.inspector.server import InspectorServer  # noqa: E402
from contextfold.storage import open_store  # noqa: E402
from tests.inspector.inspector_support import Replayed, replay  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
README_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "images" / "inspector.png"
TOKEN = "browser-test-token"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    return replay(tmp_path_factory.mktemp("inspector-browser") / "ws")


@pytest.fixture(scope="module")
def server(replayed: Replayed) -> Iterator[InspectorServer]:
    store = open_store(str(replayed.folder))
    srv = InspectorServer(store, port=0, token=TOKEN).start()
    try:
        yield srv
    finally:
        srv.stop()
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        skip_or_fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A page that records console errors, page errors and failed requests."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1300})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.errors.append(f"failed: {r.url}"))
        self.outside: list[str] = []
        #: answers of 400 and above, by URL (what a console error is about)
        self.refused: list[str] = []
        self.page.on(
            "response",
            lambda r: self.refused.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )

    def open(self, url: str) -> Any:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']")
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, server: InspectorServer) -> Iterator[Page]:
    p = Page(browser)
    origin = server.url.rstrip("/")
    p.page.on("request", lambda r: None if r.url.startswith(origin) else p.outside.append(r.url))
    try:
        yield p
    finally:
        assert p.errors == [], (p.errors, p.refused)
        assert p.outside == [], p.outside
        p.close()


def test_sessions_then_the_timeline_shows_the_recorded_compactions(
    page: Page, server: InspectorServer, replayed: Replayed, tmp_path: Path
) -> None:
    pg = page.open(server.url)
    row = pg.locator(f"tr[data-session='{replayed.session_id}']")
    assert row.count() == 1
    pg.screenshot(path=str(tmp_path / "sessions.png"))
    row.click()
    pg.wait_for_selector("#chart")
    pg.wait_for_selector("body[data-ready='1']")
    tl = pg.evaluate(f"fetch('api/sessions/{replayed.session_id}').then(r => r.json())")
    marks = pg.locator("#chart line.mark")
    cards = pg.locator("#compactions details")
    assert marks.count() == cards.count() == len(tl["compactions"]) >= 2
    assert [cards.nth(i).get_attribute("data-tier") for i in range(cards.count())] == [
        c["tier"] for c in tl["compactions"]
    ]
    assert pg.locator("#chart circle.dot").count() == replayed.calls
    # the view at the newest call: summarized messages marked next to what was sent
    assert pg.locator("#history-col .msg[data-status='summarized']").count() > 0
    assert pg.locator("#view-col .msg[data-status='summarized']").count() == 0
    assert pg.locator("#view-col .st-summary").count() == 1
    pg.screenshot(path=str(tmp_path / "session.png"), full_page=False)
    README_IMAGE.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tmp_path / "session.png", README_IMAGE)


def test_a_restore_click_shows_the_exact_original_text(
    page: Page, server: InspectorServer, replayed: Replayed, tmp_path: Path
) -> None:
    sid = replayed.session_id
    pg = page.open(server.url + f"#/s/{sid}")
    first = (
        pg.locator("#history-col .msg[data-status='summarized'][data-position]")
        .filter(has=pg.locator("text=tool"))
        .first
    )
    pos = int(first.get_attribute("data-position"))
    first.locator("button.restore").click()
    pg.wait_for_selector("#restore-check.ok, #restore-check.muted, #restore-check.bad")
    shown = pg.locator("#restore-text").text_content()
    assert shown == replayed.messages[pos]["content"]
    # an offloaded output, through its offload link: the blob, its sha256 checked
    link = pg.locator("#history-col .msg a.link", has_text="tool_results/").first
    link.click()
    pg.wait_for_selector("#restore-check.ok")
    assert "matches" in pg.locator("#restore-check").text_content()
    text = pg.locator("#restore-text").text_content()
    outputs = [m.get("content") for m in replayed.messages if m.get("role") == "tool"]
    assert text in outputs and len(text) > 1000
    pg.screenshot(path=str(tmp_path / "restore.png"))


def test_recall_search_finds_a_known_output(
    page: Page, server: InspectorServer, replayed: Replayed
) -> None:
    pg = page.open(server.url + f"#/s/{replayed.session_id}")
    pg.fill("#recall-query", "pytest L060")
    pg.click("#recall-go")
    pg.wait_for_selector("#recall-results .recall-hit")
    assert "test session starts" in pg.locator("#recall-results").text_content()


def test_a_call_picked_on_the_chart_shows_its_view(
    page: Page, server: InspectorServer, replayed: Replayed
) -> None:
    pg = page.open(server.url + f"#/s/{replayed.session_id}")
    pg.locator("#chart circle.dot[data-call='3']").click()
    pg.wait_for_selector("text=View at call 3 (")
    assert pg.locator("#view-title").text_content().startswith("View at call 3 ")
    assert pg.locator("#history-col .msg[data-status='summarized']").count() == 0
    assert pg.locator("#view-col .msg").count() == pg.locator("#history-col .msg").count()


def test_delete_asks_first_and_needs_the_token(
    page: Page, server: InspectorServer, replayed: Replayed
) -> None:
    doomed = replay(replayed.folder, "doomed")
    pg = page.open(server.url + "#/s/doomed")
    answers: list[str] = []

    def on_dialog(dialog: Any) -> None:
        answers.append(dialog.message)
        if dialog.type == "confirm" and len(answers) == 1:
            dialog.dismiss()  # the first time: thought better of it
        else:
            dialog.accept()

    pg.on("dialog", on_dialog)
    pg.click("#delete")  # the dialog is answered before click() returns
    assert "cannot be undone" in answers[0]
    assert pg.url.endswith("#/s/doomed")
    # confirmed without the token: the server refuses and the page says so
    pg.click("#delete")
    pg.wait_for_selector("#token-box:not([hidden])")
    assert len(answers) == 3 and "token" in answers[2]
    page.errors = [e for e in page.errors if "401" not in e]  # the refusal itself
    # with the token (typed into the box the refusal showed)
    pg.fill("#token", TOKEN)
    pg.dispatch_event("#token", "change")
    pg.wait_for_selector("body[data-ready='1']")
    pg.click("#delete")
    pg.wait_for_selector("table#sessions")
    pg.wait_for_selector("body[data-ready='1']")
    assert pg.locator("tr[data-session='doomed']").count() == 0
    assert pg.locator(f"tr[data-session='{replayed.session_id}']").count() == 1
    assert doomed.calls > 0
