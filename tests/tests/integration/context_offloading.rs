//! Context offloading on the real stack: summaries shown in place of the turns they cover,
//! every turn the view leaves out readable again by range, the policy chosen by agent name and
//! recorded in the view, forks that inherit their parent's view at the fork point (at a
//! checkpoint and at a seq), and retractions (`EventRetracted`, over HTTP) that withdraw a
//! turn from the view while the log and range reads keep both.
//!
//! The projector runs as a separate `sessionlog project` process given the same `[context]`
//! policies as the test's `Recovery`.

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::context::ResumeContext;
use sessionlog_recovery::{EventRange, ForkAt, Recovery};
use sessionlog_schemas::{Content, Seq, SessionEvent, SessionId};
use sessionlog_session::context::{ContextPolicies, ContextPolicy};
use sessionlog_testkit::ingest::{IngestInstance, user_request};
use sessionlog_testkit::projector::{
    assert_same_tables, event_log, replay_into, store, wait_caught_up,
};
use sessionlog_testkit::{ServedProcess, TestStack, all_pages};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const CATCH_UP: Duration = Duration::from_secs(120);

/// A stack whose `[context]` gives agent `narrow` a small view: 4 turns, 2 summaries.
async fn stack(name: &str) -> Result<TestStack> {
    let mut stack = TestStack::new(name, 2).await?;
    stack.settings.context = ContextPolicies {
        default: ContextPolicy::default(),
        agents: [(
            "narrow".to_string(),
            ContextPolicy {
                recent_turns: 4,
                summaries: 2,
                token_budget: 3_000,
                ..ContextPolicy::default()
            },
        )]
        .into(),
    };
    Ok(stack)
}

/// Appends `n` user requests, returning their seqs.
async fn turns(writer: &mut SessionWriter, tag: &str, n: u64) -> Result<Vec<Seq>> {
    let mut seqs = Vec::new();
    for _ in 0..n {
        let seq = writer.state().last_seq + 1;
        writer.user_request(&format!("{tag} turn {seq}")).await?;
        seqs.push(seq);
    }
    Ok(seqs)
}

async fn summarize(writer: &mut SessionWriter, first_seq: Seq, last_seq: Seq) -> Result<()> {
    writer
        .summarize(
            first_seq,
            last_seq,
            "summariser",
            &format!("summary of {first_seq}..={last_seq}"),
        )
        .await?;
    Ok(())
}

/// The seqs `recovery` reads back for `session` between `first` and `last`, every page.
async fn read_back(
    recovery: &Recovery,
    session: SessionId,
    first: Seq,
    last: Seq,
) -> Result<BTreeSet<Seq>> {
    let range = EventRange {
        from_seq: Some(first),
        to_seq: Some(last),
        ..EventRange::default()
    };
    let pages = all_pages(recovery, session, range).await?;
    Ok(pages
        .iter()
        .flat_map(|p| p.events.iter().map(|e| e.seq))
        .collect())
}

/// Every seq the view shows as a turn or references by a summary's or an older range.
fn reachable_ranges(view: &ResumeContext) -> Vec<(Seq, Seq)> {
    view.turns
        .iter()
        .map(|t| (t.seq, t.seq))
        .chain(view.summaries.iter().map(|s| (s.first_seq, s.last_seq)))
        .chain(view.older.iter().map(|r| (r.first_seq, r.last_seq)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn summaries_stand_in_for_their_turns_and_every_turn_left_out_reads_back() -> Result<()> {
    let stack = stack("ctx_summary").await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(Arc::clone(&log), "narrow", None).await?;
    let session = writer.session_id();
    let mut all = turns(&mut writer, "a", 30).await?;
    summarize(&mut writer, 2, 20).await?;
    all.extend(turns(&mut writer, "b", 10).await?);
    summarize(&mut writer, 21, 35).await?;
    all.extend(turns(&mut writer, "c", 10).await?);
    summarize(&mut writer, 36, 45).await?;
    all.extend(turns(&mut writer, "d", 6).await?);
    wait_caught_up(&stack, &store(&stack).await?, CATCH_UP).await?;

    // The projector built the view with the agent's policy and recorded it.
    let stored = store(&stack)
        .await?
        .load_context(session)
        .await?
        .context("the projector stored no view")?;
    ensure!(
        stored.policy.recent_turns == 4 && stored.policy.summaries == 2,
        "the view was built with {:?}",
        stored.policy
    );
    ensure!(
        stored.recent.len() == 4,
        "{} recent turns",
        stored.recent.len()
    );
    let kept: Vec<(Seq, Seq)> = stored
        .summaries
        .iter()
        .map(|s| (s.first_seq, s.last_seq))
        .collect();
    ensure!(kept == [(21, 35), (36, 45)], "summaries kept: {kept:?}");

    let recovery = Recovery::connect(&stack.settings).await?;
    let bundle = recovery.resume(session, "harness-2", None).await?;
    let view = &bundle.context;
    ensure!(view.budget_tokens == 3_000, "budget {}", view.budget_tokens);
    ensure!(
        view.summaries.iter().all(|s| s.turn.text.as_deref()
            == Some(&*format!("summary of {}..={}", s.first_seq, s.last_seq))),
        "summaries read opened: {:?}",
        view.summaries
    );
    // Every turn is shown or referenced, and every reference reads back from the log.
    let ranges = reachable_ranges(view);
    let mut read = BTreeSet::new();
    for &(first, last) in &ranges {
        read.extend(read_back(&recovery, session, first, last).await?);
    }
    for seq in &all {
        ensure!(
            ranges.iter().any(|(f, l)| (f..=l).contains(&seq)),
            "turn {seq} is neither in the view nor referenced: {ranges:?}"
        );
        ensure!(read.contains(seq), "turn {seq} did not read back");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_inherits_its_parents_view_at_the_fork_point() -> Result<()> {
    let stack = stack("ctx_fork").await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let (mut parent, _) = SessionWriter::create(Arc::clone(&log), "narrow", None).await?;
    let parent_id = parent.session_id();
    turns(&mut parent, "p", 8).await?;
    parent
        .append(SessionEvent::PlanUpdated {
            plan: Content::plain("the parent's plan"),
        })
        .await?;
    let checkpoint = parent.checkpoint(None).await?.envelope.seq;
    let at_seq = turns(&mut parent, "p", 5).await?[2];
    // The parent goes on after both fork points: the child must not see that.
    turns(&mut parent, "later", 5).await?;
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, CATCH_UP).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    for (at, through) in [
        (ForkAt::Checkpoint(checkpoint), checkpoint),
        (ForkAt::Seq(at_seq), at_seq),
    ] {
        let first = recovery.fork(parent_id, at, "narrow").await?;
        let child = first.envelope.session_id;
        let mut child_writer = SessionWriter::current(Arc::clone(&log), child).await?;
        turns(&mut child_writer, "child", 2).await?;
        wait_caught_up(&stack, &store, CATCH_UP).await?;

        let bundle = recovery.resume(child, "child-harness", None).await?;
        let own: Vec<&str> = bundle
            .context
            .turns
            .iter()
            .filter_map(|t| t.text.as_deref())
            .collect();
        ensure!(
            own.len() == 2 && own.iter().all(|t| t.starts_with("child")),
            "the child's own turns: {own:?}"
        );
        let inherited = bundle
            .context
            .inherited
            .as_ref()
            .context("a fork's context inherits nothing")?;
        ensure!(inherited.parent == parent_id && inherited.through_seq == through);
        let view = inherited
            .context
            .as_ref()
            .context("the parent's view is missing")?;
        let seqs: Vec<Seq> = view.turns.iter().map(|t| t.seq).collect();
        ensure!(
            !seqs.is_empty() && seqs.iter().all(|s| *s <= through),
            "inherited turns {seqs:?} past the fork point {through}"
        );
        // The parent's four most recent turns at the fork point, in order, opened.
        let expected: Vec<Seq> = (1..=through)
            .filter(|s| (2..=9).contains(s) || *s > checkpoint)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .take(4)
            .rev()
            .collect();
        ensure!(
            seqs == expected,
            "inherited {seqs:?}, expected {expected:?}"
        );
        ensure!(
            view.turns
                .iter()
                .all(|t| t.text.as_deref().is_some_and(|x| x.starts_with("p turn"))),
            "inherited texts: {:?}",
            view.turns
        );
        ensure!(view.plan.as_deref() == Some("the parent's plan"));
        // The inherited references are into the parent's range, which reads back.
        for (first, last) in reachable_ranges(view) {
            let read = read_back(&recovery, parent_id, first, last).await?;
            ensure!(
                !read.is_empty(),
                "{first}..={last} of the parent read nothing"
            );
        }
    }
    Ok(())
}

/// Review: with encryption off, a parent erased after the fork still showed its plain texts
/// in what the child inherited.
#[tokio::test(flavor = "multi_thread")]
async fn a_parent_erased_after_the_fork_leaves_its_child_no_text() -> Result<()> {
    let mut stack = stack("ctx_erased").await?;
    stack.settings.privacy.encrypt = false;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let (mut parent, _) = SessionWriter::create(Arc::clone(&log), "narrow", None).await?;
    let parent_id = parent.session_id();
    let at = *turns(&mut parent, "p", 6)
        .await?
        .last()
        .context("no turns")?;
    parent
        .append(SessionEvent::PlanUpdated {
            plan: Content::plain("the parent's plan"),
        })
        .await?;
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, CATCH_UP).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let child = recovery
        .fork(parent_id, ForkAt::Seq(at), "narrow")
        .await?
        .envelope
        .session_id;
    recovery.erase(parent_id, "dpo", "request").await?;
    wait_caught_up(&stack, &store, CATCH_UP).await?;

    let bundle = recovery.resume(child, "child-harness", None).await?;
    let inherited = bundle
        .context
        .inherited
        .as_ref()
        .and_then(|i| i.context.as_ref())
        .context("the parent's view is missing")?;
    ensure!(!inherited.turns.is_empty(), "no inherited turns");
    ensure!(
        inherited.turns.iter().all(|t| t.text.is_none()),
        "an erased parent's texts reached its child: {:?}",
        inherited.turns
    );
    ensure!(inherited.plan.as_deref() != Some("the parent's plan"));
    Ok(())
}

/// An `EventRetracted` event of an append request.
fn retraction(seq: Seq, retracted_seq: Seq) -> Value {
    json!({
        "seq": seq,
        "event_id": uuid::Uuid::now_v7(),
        "kind": "EventRetracted",
        "data": { "retracted_seq": retracted_seq, "retracted_by": "openai-agents:pop_item" },
    })
}

/// The seqs of the turns a resume context (JSON) shows.
fn turn_seqs(context: &Value) -> Result<Vec<u64>> {
    context["turns"]
        .as_array()
        .context("no turns in the context")?
        .iter()
        .map(|t| t["seq"].as_u64().context("a turn without a seq"))
        .collect()
}

/// `Session.pop_item()` of the OpenAI Agents SDK integration, over HTTP: the retracted turn
/// leaves the projected view and the resume context, the range read keeps both events, and
/// a retraction of a future or an already retracted seq is refused with nothing appended.
#[tokio::test(flavor = "multi_thread")]
async fn a_retraction_over_http_withdraws_the_turn_and_the_log_keeps_both() -> Result<()> {
    let stack = stack("ctx_retract").await?;
    let _projector = stack.spawn_projector()?;
    let ingest = IngestInstance::start(&stack).await?;
    let recovery = ServedProcess::start(&stack, "serve-recovery").await?;
    let http = sessionlog_testkit::auth::client()?;

    let (status, created) = ingest
        .post("/v1/sessions", json!({"agent": "narrow"}))
        .await?;
    ensure!(status == 201, "create: {status} {created}");
    let session = created["session_id"]
        .as_str()
        .context("no session_id")?
        .to_string();
    let events = format!("/v1/sessions/{session}/events");
    let append = |events_json: Vec<Value>| {
        let body = json!({"epoch": 1, "events": events_json});
        ingest.post(&events, body)
    };
    let turns: Vec<Value> = (2..=4)
        .map(|seq| user_request(seq, &uuid::Uuid::now_v7(), &format!("turn {seq}")))
        .collect();
    let (status, answer) = append(turns).await?;
    ensure!(status == 200, "turns: {status} {answer}");
    let (status, answer) = append(vec![retraction(5, 4)]).await?;
    ensure!(status == 200, "the retraction: {status} {answer}");

    // A future seq, the same seq again, and the retraction itself: refused, nothing appended.
    for (retracted, why) in [
        (9, "earlier event"),
        (4, "already retracted"),
        (5, "cannot be retracted"),
    ] {
        let (status, problem) = append(vec![retraction(6, retracted)]).await?;
        ensure!(
            status == 422 && problem["code"] == "invalid_event",
            "retracting seq {retracted}: {status} {problem}"
        );
        let detail = problem["detail"].as_str().unwrap_or_default();
        ensure!(
            detail.contains(why),
            "retracting seq {retracted}: {problem}"
        );
    }
    // Seq 6 is still free.
    let (status, answer) = append(vec![user_request(6, &uuid::Uuid::now_v7(), "turn 6")]).await?;
    ensure!(status == 200, "turn 6: {status} {answer}");

    // The projector's view and its stored turn rows no longer hold seq 4.
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, CATCH_UP).await?;
    let id: SessionId = session.parse()?;
    let stored = store
        .load_context(id)
        .await?
        .context("the projector stored no view")?;
    let stored_seqs: Vec<Seq> = stored.recent.iter().map(|t| t.seq).collect();
    ensure!(stored_seqs == [2, 3, 6], "projected turns {stored_seqs:?}");
    ensure!(
        stored.left_out.retracted_turns == 1,
        "{:?}",
        stored.left_out
    );

    // The resume context over HTTP: without the retracted turn, and saying one was retracted.
    let response = http
        .post(format!("{}/v1/sessions/{session}/resume", recovery.base))
        .json(&json!({"writer": "harness-2"}))
        .send()
        .await?;
    let status = response.status();
    let bundle: Value = response.json().await?;
    ensure!(status == 200, "resume: {status} {bundle}");
    let context = &bundle["context"];
    ensure!(
        turn_seqs(context)? == [2, 3, 6],
        "resumed turns: {}",
        context["turns"]
    );
    let texts: Vec<&str> = context["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["text"].as_str())
        .collect();
    ensure!(texts == ["turn 2", "turn 3", "turn 6"], "texts {texts:?}");
    ensure!(
        context["left_out"]["retracted_turns"] == 1
            && context["left_out"]["by_kind"]["EventRetracted"] == 1,
        "left_out: {}",
        context["left_out"]
    );
    ensure!(
        bundle["state"]["retracted"] == json!({"4": 5}),
        "state: {}",
        bundle["state"]
    );

    // The range read keeps the turn and its retraction.
    let response = http
        .get(format!(
            "{}/v1/sessions/{session}/events?from_seq=4&to_seq=5",
            recovery.base
        ))
        .send()
        .await?;
    let status = response.status();
    let page: Value = response.json().await?;
    ensure!(status == 200, "range read: {status} {page}");
    let read: Vec<(u64, &str)> = page["events"]
        .as_array()
        .context("no events")?
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().unwrap_or(0),
                e["kind"].as_str().unwrap_or(""),
            )
        })
        .collect();
    ensure!(
        read == [(4, "UserRequest"), (5, "EventRetracted")],
        "range read: {read:?}"
    );
    let withdrawn = &page["events"][1]["event"]["EventRetracted"];
    ensure!(
        *withdrawn == json!({"retracted_seq": 4, "retracted_by": "openai-agents:pop_item"}),
        "the retraction read back as {withdrawn}"
    );

    // `sessionlog events` names what the retraction withdrew.
    let output = stack
        .command(&[])?
        .args(["events", &session, "--from", "5", "--to", "5"])
        .output()?;
    let printed = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !printed.contains("retracts seq 4") {
        bail!(
            "sessionlog events: {} {printed} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    // A replay gives the projector's tables, the retracted turn's deleted row included.
    wait_caught_up(&stack, &store, CATCH_UP).await?;
    let live = &stack.settings.cql.keyspace;
    let fresh = format!("{live}_r");
    replay_into(&stack, &fresh).await?;
    assert_same_tables(&store, live, &fresh).await?;
    Ok(())
}
