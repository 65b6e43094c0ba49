"""The console (`sessionlog console`) in a real browser: headless Chromium (Debian's package,
`scripts/chromium-env`) driven by Playwright with the system browser's executable, against the
console served on this run's corner of the stack.

A person logs in with a token once; a harness waits for an approval, the approver approves it in
the inbox and the harness goes on to complete the session; a reader sees no action buttons and its
form posts are refused; a tenant sees only its own sessions; a session whose texts hold markup
runs no script; axe-core finds no serious accessibility violation on any page. Screenshots go to
``target/console-screenshots``."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, Playwright, sync_playwright

import sessionlog
from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from stackcorner import REPO, StackCorner, wait_for

#: The markup a hostile text carries: if either ran, it would set ``window.__pwned``.
SCRIPT = "<script>window.__pwned = 'script'</script>"
ATTRIBUTE = "\"><img src=x onerror=\"window.__pwned = 'onerror'\">"

SCREENSHOTS = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "console-screenshots"


def chromium() -> str:
    """The system Chromium (`scripts/chromium-env` installs Debian's package)."""
    path = os.environ.get("SESSIONLOG_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/chromium-env (apt-get install -y chromium)")
    return path


def event(seq: int, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "event_id": str(uuid.uuid4()), "kind": kind, "data": data}


def waiting_for_approval(c: sessionlog.Client, agent: str, title: str, action: str) -> str:
    """A session whose harness asked for approval ``deploy`` of ``action``, projected; its id."""
    opened = c.create(agent, title)
    request = event(opened.next_seq, "ApprovalRequested", {"approval_id": "deploy", "action": {"Plain": action}})
    c.append(opened.session_id, opened.epoch, [request], writer_token=opened.writer_token)
    projected_status(c, opened.session_id, "awaiting_approval")
    return opened.session_id


def projected_status(c: sessionlog.Client, session_id: str, status: str) -> None:
    """Waits until the projection lists ``session_id`` as ``status`` (the inbox reads it)."""

    def listed() -> bool | None:
        # The console's lists read the projection: wait for the projector to have the event.
        last = int(c.session(session_id).state["last_seq"])
        events = list(c.events(session_id))
        return (bool(events) and events[-1].seq == last and c.session(session_id).status == status) or None

    wait_for(f"{session_id} projected as {status}", 60, listed)


@pytest.fixture(scope="module")
def console(corner: StackCorner) -> str:
    """The console's base URL, served on the corner's topic and keyspace."""
    return corner.serve("console", "console")


@pytest.fixture
def harness(corner: StackCorner) -> Iterator[sessionlog.Client]:
    """A harness's client (of the default tenant)."""
    token = corner.token("harness", "reader", subject="console-harness")
    with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = launch(playwright)
        yield launched
        launched.close()


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=chromium(), headless=True)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport={"width": 1280, "height": 900})
    yield made
    made.close()


def log_in(context: BrowserContext, console: str, token: str) -> Page:
    """A page of ``context`` logged in to the console with ``token``, on the inbox."""
    page = context.new_page()
    page.goto(f"{console}/login")
    page.get_by_label("Bearer token or API key").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{console}/")
    assert page.get_by_role("heading", name="Inbox").is_visible()
    return page


def shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_an_approver_approves_in_the_inbox_and_the_waiting_harness_completes(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session_id = waiting_for_approval(c, "deployer", "ship release 7", "deploy release 7 to production")
    outcome: dict[str, str] = {}

    def resume_when_decided() -> None:
        """Waits for the decision, then resumes and completes the session."""
        wait_for("the decision", 120, lambda: c.session(session_id).status != "awaiting_approval" or None)
        bundle = c.resume(session_id, "console-harness")
        decision = bundle.state["decided_approvals"]["deploy"]
        outcome["decided_by"] = decision["decided_by"]
        c.close(session_id, bundle.epoch, "Completed" if decision["approved"] else "Failed", writer_token=bundle.writer_token)
        outcome["closed"] = "yes"

    waiting = threading.Thread(target=resume_when_decided, daemon=True)
    waiting.start()

    page = log_in(context, console, corner.token("approver", "reader", subject="console-approver"))
    row = page.get_by_role("row").filter(has_text=session_id)
    assert "deploy release 7 to production" in row.inner_text()
    shoot(page, "inbox")
    row.get_by_label("Reason").fill("release checklist done")
    row.get_by_role("button", name="Approve").click()
    page.wait_for_url(f"{console}/?done=approved")
    assert "Approved" in page.get_by_role("status").inner_text()
    shoot(page, "inbox-approved")

    waiting.join(timeout=150)
    assert outcome.get("closed") == "yes", "the harness did not go on after the approval"
    assert outcome["decided_by"] == "console-approver", "the decision names the verified caller"
    wait_for("the session to complete", 60, lambda: c.session(session_id).status == "completed" or None)

    def shows_the_end() -> bool | None:
        page.goto(f"{console}/sessions/{session_id}")
        return "SessionEnded" in page.inner_text("table.timeline") or None

    wait_for("the session page to show the end", 60, shows_the_end)
    assert "completed" in page.inner_text("dl.header")
    assert "ApprovalDecided" in page.inner_text("table.timeline")
    shoot(page, "session")


def test_an_operator_records_the_outcome_of_a_call_in_doubt_in_the_inbox(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    opened = c.create("charger", "charge order 9")
    data = {"tool": "console_charge", "arguments": {"Plain": '{"order":9}'}, "effect": "NonIdempotent"}
    intent = {**event(opened.next_seq, "ToolCallRequested", data), "idempotency_key": "order-9"}
    c.append(opened.session_id, opened.epoch, [intent], writer_token=opened.writer_token)
    session_id, call_seq = opened.session_id, opened.next_seq
    # The harness died after the intent: recovery stops the session for an operator.
    with pytest.raises(sessionlog.errors.NeedsResolution):
        c.resume(session_id, "console-harness-2")
    projected_status(c, session_id, "needs_resolution")

    page = log_in(context, console, corner.token("operator", "reader", subject="console-operator"))
    row = page.get_by_role("row").filter(has_text=session_id)
    assert "console_charge" in row.inner_text() and "order-9" in row.inner_text()
    row.get_by_label("Outcome").select_option("succeeded")
    row.get_by_label("Output").fill("charged once, receipt 41")
    row.get_by_label("Reason").fill("the payment service shows one charge for order-9")
    shoot(page, "inbox-in-doubt")
    row.get_by_role("button", name="Record outcome").click()
    page.wait_for_url(f"{console}/?done=resolved")
    view = c.session(session_id)
    assert view.status == "running", view.status
    result = view.state["operator_results"][str(call_seq)]
    assert result["recorded_by"] == "console-operator", result


def test_an_operator_pauses_on_the_session_page_and_unpauses_in_the_inbox(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    opened = c.create("pausable", "a long run")
    session_id = opened.session_id
    projected_status(c, session_id, "running")
    page = log_in(context, console, corner.token("operator", "reader", subject="console-operator"))
    page.goto(f"{console}/sessions/{session_id}")
    page.get_by_label("Why pause").fill("change freeze")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(f"{console}/sessions/{session_id}?done=paused")
    assert c.session(session_id).status == "paused"
    projected_status(c, session_id, "paused")

    page.goto(f"{console}/")
    paused = page.get_by_role("region", name="Paused sessions").get_by_role("row").filter(has_text=session_id)
    paused.get_by_role("button", name="Unpause").click()
    page.wait_for_url(f"{console}/?done=unpaused")
    assert c.session(session_id).status == "running"
    events = [e.kind for e in c.events(session_id)]
    assert "SessionPaused" in events


def test_a_page_weighs_under_200_kb_before_content(corner: StackCorner, console: str, context: BrowserContext) -> None:
    page = log_in(context, console, corner.token("reader", subject="console-reader"))
    # A list with nothing in it: the page's frame, forms and stylesheet alone (no script).
    page.goto(f"{console}/sessions?days=1&status=erased")
    assert page.evaluate("document.scripts.length") == 0
    css = len(page.request.get(f"{console}/static/console.css").body())
    html = len(page.content().encode())
    assert css + html < 200_000, (css, html)


def test_a_reader_sees_no_action_buttons_and_its_posts_are_refused(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session_id = waiting_for_approval(c, "reader-check", "read only", "rotate the keys")
    page = log_in(context, console, corner.token("reader", subject="console-reader"))
    row = page.get_by_role("row").filter(has_text=session_id)
    assert "rotate the keys" in row.inner_text()
    for name in ["Approve", "Deny", "Record outcome", "Unpause"]:
        assert page.get_by_role("button", name=name).count() == 0, f"a reader sees {name}"
    shoot(page, "inbox-reader")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    assert csrf, "the logout form carries the login's CSRF token"
    # The form a reader cannot see, sent anyway with a valid token: refused by role.
    forms: list[tuple[str, dict[str, str | float | bool]]] = [
        (f"/sessions/{session_id}/approvals/deploy", {"csrf": csrf, "decision": "approve"}),
        (f"/sessions/{session_id}/unpause", {"csrf": csrf}),
        (f"/sessions/{session_id}/steering", {"csrf": csrf, "text": "go"}),
    ]
    for path, form in forms:
        answer = page.request.post(f"{console}{path}", form=form, max_redirects=0)
        assert answer.status == 403, (path, answer.status, answer.text()[:300])
    assert c.session(session_id).status == "awaiting_approval", "nothing was decided"


def test_a_post_without_the_logins_csrf_token_is_refused(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session_id = waiting_for_approval(c, "csrf-check", "csrf", "drop the table")
    page = log_in(context, console, corner.token("approver", "reader", subject="console-approver"))
    path = f"{console}/sessions/{session_id}/approvals/deploy"
    forged: list[dict[str, str | float | bool]] = [{"decision": "approve", "csrf": "forged"}, {"decision": "approve", "csrf": ""}]
    for form in forged:
        assert page.request.post(path, form=form, max_redirects=0).status == 403
    assert c.session(session_id).status == "awaiting_approval", "nothing was decided"


def test_a_tenant_sees_only_its_own_sessions(corner: StackCorner, console: str, context: BrowserContext) -> None:
    ids: dict[str, str] = {}
    for tenant in ("acme", "globex"):
        token = corner.token("harness", "reader", subject=f"{tenant}-harness", tenant=tenant)
        with sessionlog.Client(corner.ingest_url, corner.recovery_url, token=token) as c:
            ids[tenant] = waiting_for_approval(c, f"{tenant}-agent", f"{tenant}'s run", f"{tenant}'s secret action")
    page = log_in(context, console, corner.token("approver", "reader", subject="acme-approver", tenant="acme"))
    inbox = page.inner_text("main")
    assert ids["acme"] in inbox and "acme's secret action" in inbox
    assert ids["globex"] not in inbox and "globex" not in inbox
    page.goto(f"{console}/sessions?days=1")
    listed = page.inner_text("main")
    assert ids["acme"] in listed and ids["globex"] not in listed
    shoot(page, "sessions")
    answer = page.goto(f"{console}/sessions/{ids['globex']}")
    assert answer is not None and answer.status == 404, "another tenant's session is unknown"
    assert "globex" not in page.inner_text("main")


def test_a_session_whose_texts_hold_markup_runs_no_script(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    opened = c.create("xss-agent", f"title {SCRIPT} {ATTRIBUTE}")
    events = [
        event(opened.next_seq, "UserRequest", {"content": {"Plain": f"hello {SCRIPT} {ATTRIBUTE}"}}),
        event(opened.next_seq + 1, "ApprovalRequested", {"approval_id": "deploy", "action": {"Plain": f"{SCRIPT}{ATTRIBUTE}"}}),
    ]
    c.append(opened.session_id, opened.epoch, events, writer_token=opened.writer_token)
    session_id = opened.session_id
    projected_status(c, session_id, "awaiting_approval")
    dialogs: list[str] = []

    def dialog(d: Dialog) -> None:
        dialogs.append(d.message)
        d.dismiss()

    context.on("dialog", dialog)
    page = log_in(context, console, corner.token("approver", "operator", "reader", subject="console-operator"))
    answer = page.goto(f"{console}/")
    assert answer is not None
    policy = answer.headers.get("content-security-policy", "")
    assert "default-src 'none'" in policy and "script-src" not in policy, policy
    for url in [f"{console}/", f"{console}/sessions?days=1", f"{console}/sessions/{session_id}", f"{console}/sessions/{session_id}?open=2#e2"]:
        page.goto(url)
        assert page.evaluate("window.__pwned === undefined"), f"a script ran on {url}"
        assert page.locator("img").count() == 0, f"markup from a session became an element on {url}"
        assert page.locator("body script").count() == 0, f"a script element on {url}"
    # Shown as the text it is.
    assert SCRIPT in page.inner_text("main")
    assert "onerror" in page.inner_text("pre.content")
    shoot(page, "session-markup")
    assert dialogs == []


def test_axe_finds_no_serious_accessibility_violation_on_any_page(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    session_id = waiting_for_approval(harness, "accessible", "a11y", "publish the report")
    page = log_in(context, console, corner.token("approver", "operator", "reader", subject="console-a11y"))
    axe = Axe()
    # The checker itself finds what it should: an input without a label.
    probe = context.new_page()
    probe.set_content('<html lang="en"><title>probe</title><main><input type="text"></main></html>')
    assert "label" in [v["id"] for v in axe.run(probe).response["violations"]], "axe-core did not run"
    for url in [f"{console}/", f"{console}/sessions?days=1", f"{console}/sessions/{session_id}?open=2#e2"]:
        page.goto(url)
        violations = axe.run(page).response["violations"]
        serious = [(v["id"], v["help"], len(v["nodes"])) for v in violations if v.get("impact") in ("serious", "critical")]
        assert serious == [], f"{url}: {serious}"
    context.clear_cookies()
    page.goto(f"{console}/login")
    violations = axe.run(page).response["violations"]
    assert [v["id"] for v in violations if v.get("impact") in ("serious", "critical")] == []
