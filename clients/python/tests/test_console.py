"""The console (`sessionlog console`) in a real browser: headless Chromium (Debian's package,
`scripts/chromium-env`) driven by Playwright with the system browser's executable, against the
console served on this run's corner of the stack.

A person logs in with a token once; a harness waits for an approval, the approver approves it in
the inbox and the harness goes on to complete the session; a reader sees no action buttons and its
form posts are refused; a tenant sees only its own sessions; a session whose texts hold markup
runs no script; a session's page shows its header and a timeline that grows without a reload, its
context view, lineage and a fork's diff, checkpoints (a fork from one), its trace waterfall, a
redacted field as redacted and an erasure behind a typed confirmation with its receipt; the fleet
page shows projector lag, dead letters, orphans, schema versions and usage charts; axe-core finds
no serious accessibility violation on any page. Screenshots go to ``target/console-screenshots``
(the ones in docs/images are copied from there)."""

from __future__ import annotations

import datetime
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, Playwright, expect, sync_playwright

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
    """The console's base URL, served on the corner's topic and keyspace, its fleet page on the
    corner's projector group (the setting `sessionlog status` reads too)."""
    return corner.serve("console", "console", env={"SESSIONLOG_PROJECTOR__GROUP_ID": corner.group})


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
    for path in ["", "/checkpoints"]:
        page.goto(f"{console}/sessions/{session_id}{path}")
        assert page.locator("main form").count() == 0, f"a reader sees a form on {path or 'the session page'}"
        assert page.get_by_role("link", name="Erase this session…").count() == 0
    refused = page.goto(f"{console}/sessions/{session_id}/erase")
    assert refused is not None and refused.status == 403, "a reader is refused the erasure's form"
    # The form a reader cannot see, sent anyway with a valid token: refused by role.
    forms: list[tuple[str, dict[str, str | float | bool]]] = [
        (f"/sessions/{session_id}/approvals/deploy", {"csrf": csrf, "decision": "approve"}),
        (f"/sessions/{session_id}/unpause", {"csrf": csrf}),
        (f"/sessions/{session_id}/steering", {"csrf": csrf, "text": "go"}),
        (f"/sessions/{session_id}/pause", {"csrf": csrf, "reason": "no"}),
        (f"/sessions/{session_id}/fork", {"csrf": csrf, "at_checkpoint": "1", "agent": "x"}),
        (f"/sessions/{session_id}/erase", {"csrf": csrf, "reason": "no", "confirm": session_id}),
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
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'self'", policy
    assert "unsafe" not in policy, policy
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
    pages = ["/", "/sessions?days=1", f"/sessions/{session_id}?open=2#e2", "/fleet"]
    pages += [f"/sessions/{session_id}/{view}" for view in ["context", "lineage", "checkpoints", "trace", "erase"]]
    for url in [f"{console}{p}" for p in pages]:
        page.goto(url)
        violations = axe.run(page).response["violations"]
        serious = [(v["id"], v["help"], len(v["nodes"])) for v in violations if v.get("impact") in ("serious", "critical")]
        assert serious == [], f"{url}: {serious}"
    context.clear_cookies()
    page.goto(f"{console}/login")
    violations = axe.run(page).response["violations"]
    assert [v["id"] for v in violations if v.get("impact") in ("serious", "critical")] == []


def recovery_api(corner: StackCorner, token: str) -> httpx.Client:
    """The recovery service's HTTP API with ``token``: what a script would call."""
    return httpx.Client(base_url=f"{corner.recovery_url}/v1", headers={"authorization": f"Bearer {token}"}, timeout=30)


def test_the_session_page_shows_its_header_and_new_events_without_a_reload(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session = sessionlog.Session.start(c, "live-agent", "a live run")
    session.user_request("first question")
    last = session.model_response("m-live", "first answer", tokens_in=1200, tokens_out=340, cost_micros=5100)
    projected_status(c, session.session_id, "running")
    page = log_in(context, console, corner.token("operator", "reader", subject="console-operator"))
    page.goto(f"{console}/sessions/{session.session_id}")
    header = page.inner_text("dl.header")
    assert "1200 in, 340 out" in header and "$0.005100" in header, header
    assert "Epoch" in header and "Writer" in header and "Lease" in header
    assert page.locator(f"#e{last.seq}").is_visible()
    # A mark on this document: gone if the page were loaded again.
    page.evaluate("window.__same_document = true")
    later = session.user_request("a question asked while the page is open")
    page.wait_for_selector(f"#e{later.seq}", timeout=60_000)
    assert "UserRequest" in page.inner_text(f"#e{later.seq}")
    session.close("Completed")
    # The policy forbids eval, so the wait is Playwright's own, not a JavaScript predicate.
    expect(page.locator("#session-status")).to_have_text("completed", timeout=60_000)
    assert page.evaluate("window.__same_document === true"), "the page was reloaded"
    shoot(page, "session-live")


def test_a_live_timeline_stops_when_its_login_ends(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    """A page left open keeps a stream that outlives the request that checked the login: after
    logging out in another tab, the open page is told its updates stopped, and an event written
    after that never reaches it."""
    c = harness
    session = sessionlog.Session.start(c, "live-agent", "watched, then logged out")
    first = session.user_request("a question asked before the logout")
    projected_status(c, session.session_id, "running")
    watching = log_in(context, console, corner.token("operator", "reader", subject="console-leaver"))
    watching.goto(f"{console}/sessions/{session.session_id}")
    assert watching.locator(f"#e{first.seq}").is_visible()
    other_tab = context.new_page()
    other_tab.goto(f"{console}/")
    other_tab.get_by_role("button", name="Log out").click()
    other_tab.wait_for_url(f"{console}/login")
    expect(watching.locator("#live-note")).to_contain_text("Live updates stopped", timeout=30_000)
    later = session.user_request("a question asked after the logout")
    projected_status(c, session.session_id, "running")
    wait_for(
        "the event written after the logout to be projected",
        60,
        lambda: any(e.seq == later.seq for e in c.events(session.session_id)) or None,
    )
    # The stream ended before the event was written: nothing can bring its row any more.
    assert watching.locator(f"#e{later.seq}").count() == 0


def test_a_session_shows_its_context_checkpoints_trace_and_an_operator_forks_from_a_checkpoint(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session = sessionlog.Session.start(c, "forkable", "a run to fork")
    session.user_request("plan the migration")
    session.model_response("m-fork", "step one: back up", tokens_in=50, tokens_out=20, cost_micros=70)
    call = session.tool_call("backup", '{"db":"orders"}', effect="Idempotent", idempotency_key="backup-orders")
    session.tool_result(call, "backed up")
    checkpoint = session.checkpoint()
    after = session.user_request("now migrate")
    parent = session.session_id
    projected_status(c, parent, "running")
    wait_for("the trace", 60, lambda: trace_spans(corner, parent) >= 3 or None)

    page = log_in(context, console, corner.token("operator", "reader", subject="console-operator"))

    def verified_row() -> Any:
        page.goto(f"{console}/sessions/{parent}/checkpoints")
        row = page.get_by_role("row").filter(has_text=f"Fork at seq {checkpoint.seq}")
        return row if row.count() == 1 and "not verified" not in row.inner_text() else None

    # The projector verifies a checkpoint's digest when it projects it.
    wait_for("the checkpoint listed as verified", 60, verified_row)
    page.goto(f"{console}/sessions/{parent}/context")
    turns = page.inner_text("table.context")
    assert "plan the migration" in turns and "now migrate" in turns, turns
    shoot(page, "session-context")

    page.goto(f"{console}/sessions/{parent}/trace")
    waterfall = page.locator("table.waterfall")
    assert "backup" in waterfall.inner_text() and waterfall.locator("svg rect").count() >= 3
    shoot(page, "session-trace")

    row = verified_row()
    assert row is not None and "verified" in row.inner_text()
    shoot(page, "session-checkpoints")
    row.get_by_label("Agent of the fork").fill("forkable-branch")
    row.get_by_role("button", name=f"Fork at seq {checkpoint.seq}").click()
    page.wait_for_url("**/sessions/*?done=forked")
    child = page.url.split("/sessions/")[1].split("?")[0]
    assert child != parent and "Forked" in page.get_by_role("status").inner_text()
    assert c.session(child).state["parent"]["parent_seq"] == checkpoint.seq
    assert c.session(child).state["parent"]["parent_session_id"] == parent

    def lineage_shows_the_fork() -> bool | None:
        page.goto(f"{console}/sessions/{child}/lineage")
        return parent in page.inner_text("main") and "This fork only" in page.inner_text("main") or None

    wait_for("the fork's lineage page", 60, lineage_shows_the_fork)
    diff = page.inner_text("section:has(#diff)")
    # The parent went on after the fork point; the child did nothing yet.
    assert f"seq {after.seq} UserRequest" in diff and "The parent only (1)" in diff, diff
    shoot(page, "session-lineage")
    wait_for("the child listed under its parent", 60, lambda: child in lineage_text(page, console, parent) or None)


def lineage_text(page: Page, console: str, session_id: str) -> str:
    page.goto(f"{console}/sessions/{session_id}/lineage")
    return page.inner_text("main")


def trace_spans(corner: StackCorner, session_id: str) -> int:
    with recovery_api(corner, corner.token("reader", subject="console-probe")) as api:
        answer = api.get(f"/sessions/{session_id}/trace")
    return int(answer.json()["span_count"]) if answer.status_code == 200 else 0


def test_a_redacted_field_reads_as_redacted_and_an_erasure_needs_the_typed_id_and_answers_its_receipt(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    c = harness
    session = sessionlog.Session.start(c, "privacy-agent", "a run with a secret")
    call = session.tool_call("lookup", '{"customer":7}', effect="Pure")
    result = session.tool_result(call, "card 4111-1111-1111-1111")
    session.user_request("thanks")
    session_id = session.session_id
    projected_status(c, session_id, "running")
    operator = corner.token("operator", "reader", subject="console-operator")
    with recovery_api(corner, operator) as api:
        answer = api.post(f"/sessions/{session_id}/redactions", json={"seq": result.seq, "field": "output", "reason": "card number, policy P-7"})
        assert answer.status_code == 200, answer.text

    page = log_in(context, console, operator)

    def shows_the_redaction() -> str | None:
        page.goto(f"{console}/sessions/{session_id}?open={result.seq}#e{result.seq}")
        row = page.inner_text(f"#e{result.seq}")
        return row if "redacted" in row else None

    row = wait_for("the redaction on the timeline", 60, shows_the_redaction)
    assert "card number, policy P-7" in row and "4111" not in row, row
    shoot(page, "session-redacted")

    page.get_by_role("link", name="Erase this session…").click()
    page.get_by_label("Why (the request or policy; no personal data)").fill("customer request 88")
    page.get_by_label("Type the session's id to confirm").fill(session_id[:-1])
    page.get_by_role("button", name="Erase for good").click()
    assert "type the session's id exactly" in page.inner_text("main")
    assert c.session(session_id).status != "erased", "a wrong confirmation erased the session"

    page.goto(f"{console}/sessions/{session_id}/erase")
    page.get_by_label("Why (the request or policy; no personal data)").fill("customer request 88")
    page.get_by_label("Type the session's id to confirm").fill(session_id)
    page.get_by_role("button", name="Erase for good").click()
    receipt = page.inner_text("dl.receipt")
    assert session_id in receipt and "console-operator" in receipt and "customer request 88" in receipt, receipt
    shoot(page, "erase-receipt")
    assert c.session(session_id).status == "erased"
    page.goto(f"{console}/sessions/{session_id}")
    assert "erased" in page.inner_text("dl.header") and "thanks" not in page.inner_text("main")
    assert page.get_by_role("link", name="Erase this session…").count() == 0


def test_the_fleet_page_shows_lag_dead_letters_orphans_schemas_and_usage(
    corner: StackCorner, console: str, context: BrowserContext, harness: sessionlog.Client
) -> None:
    session = sessionlog.Session.start(harness, "fleet-agent", "usage")
    now = time.time_ns() // 1_000
    session.model_response("m-fleet", "counted", tokens_in=700, tokens_out=70, cost_micros=900, started_at=now - 250_000)
    projected_status(harness, session.session_id, "running")
    reader = corner.token("reader", subject="console-probe")

    def usage_has_the_model() -> bool | None:
        with recovery_api(corner, reader) as api:
            lines = api.get("/usage", params={"from": today(), "by": "model"}).json()["lines"]
        return any(line["key"] == "m-fleet" for line in lines) or None

    wait_for("the usage rollup", 60, usage_has_the_model)
    page = log_in(context, console, corner.token("operator", "reader", subject="console-operator"))
    page.goto(f"{console}/fleet")
    lag = page.locator("table.lag tbody tr")
    assert lag.count() == 3, page.inner_text("main")[:3000]
    assert "1 live instance(s)" in page.inner_text("section:has(#projector)"), "the corner's projector"
    assert page.get_by_role("heading", name="Dead letters").is_visible()
    assert "dead letter(s) in" in page.inner_text("section:has(#dead-letters)")
    assert "live writer" in page.inner_text("section:has(#wake)") or "Waits for" in page.inner_text("section:has(#wake)")
    assert "writes version" in page.inner_text("section:has(#schemas)")
    by_model = page.locator("figure.chart").filter(has_text="Calls by model")
    assert "m-fleet" in by_model.inner_text() and by_model.locator("svg rect").count() >= 1
    assert "fleet-agent" in page.locator("figure.chart").filter(has_text="Calls by agent").inner_text()
    shoot(page, "fleet")

    tenant = log_in(context.browser.new_context(), console, corner.token("reader", subject="acme-reader", tenant="acme"))  # type: ignore[union-attr]
    tenant.goto(f"{console}/fleet")
    assert tenant.locator("table.lag").count() == 0, "a tenant's caller sees no deployment internals"
    assert "m-fleet" not in tenant.inner_text("main"), "another tenant's usage"
    tenant.context.close()


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
