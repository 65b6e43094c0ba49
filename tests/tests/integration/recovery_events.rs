//! Reading any range of a session's history (`Recovery::events`, `GET
//! /v1/sessions/{id}/events`, `sessionlog events`) on the real stack: exactly the seqs asked
//! for, in order; a kinds filter; pages that follow the cursor without gaps or repeats; a
//! fork's inherited history; an erased session's texts read as erased; bad input is a 400.
//!
//! Every test waits for the projector (a separate `sessionlog project` process) to reach the
//! end of the log before it reads: range reads go by the projection's event index.

use anyhow::{Context, Result, bail, ensure};
use reqwest::StatusCode;
use serde_json::Value;
use sessionlog_http::auth::Grant;
use sessionlog_log::Role;
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_recovery::{Error, EventRange, ForkAt, HistoryEvent, Recovery};
use sessionlog_schemas::{Content, SessionEvent, SessionId};
use sessionlog_testkit::producer::append_turns;
use sessionlog_testkit::projector::{event_log, store, wait_caught_up};
use sessionlog_testkit::{ServedProcess, TestStack, all_pages};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long the projector may take to reach the end of the log.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The text of the `n`th message of `tag`'s session.
fn text(tag: &str, n: u64) -> String {
    format!("{tag} message {n}")
}

/// Appends `count` turns to `writer`, each with the text `text(tag, seq)`.
async fn append_messages(writer: &mut SessionWriter, tag: &str, count: u64) -> Result<()> {
    append_turns(writer, count, |seq| text(tag, seq)).await
}

/// A long session (seq 1 and `events` more) interleaved record by record with another one on
/// a one-partition topic, so its records are not contiguous in the log; projected.
async fn long_session(stack: &TestStack, events: u64) -> Result<(SessionId, Recovery)> {
    let log = event_log(stack).await?;
    let (mut long, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    let (mut other, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    for _ in 0..events {
        append_messages(&mut long, "long", 1).await?;
        append_messages(&mut other, "other", 1).await?;
    }
    caught_up(stack).await?;
    Ok((long.session_id(), Recovery::connect(&stack.settings).await?))
}

async fn caught_up(stack: &TestStack) -> Result<()> {
    wait_caught_up(stack, &store(stack).await?, CATCH_UP).await
}

/// The readable text of an event's main content, if it has one.
fn content_text(event: &HistoryEvent) -> Option<&str> {
    match event.event.as_ref()? {
        SessionEvent::UserRequest { content } | SessionEvent::ModelResponse { content, .. } => {
            content.as_plain()
        }
        _ => None,
    }
}

fn seqs(events: &[HistoryEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_middle_range_of_a_long_session_is_exactly_its_seqs_in_order() -> Result<()> {
    let stack = TestStack::new("range_middle", 1).await?;
    let _projector = stack.spawn_projector()?;
    let (session, recovery) = long_session(&stack, 300).await?;

    let page = recovery
        .events(
            session,
            EventRange {
                from_seq: Some(120),
                to_seq: Some(180),
                ..EventRange::default()
            },
        )
        .await?;
    assert_eq!(seqs(&page.events), (120..=180).collect::<Vec<_>>());
    assert_eq!(page.next_cursor, None, "61 events fit the default page");
    for event in &page.events {
        assert_eq!(event.session_id, session);
        assert_eq!(content_text(event), Some(text("long", event.seq).as_str()));
        let kind = if event.seq.is_multiple_of(2) {
            "UserRequest"
        } else {
            "ModelResponse"
        };
        assert_eq!(event.kind, kind);
        assert_eq!(event.writer_epoch, 1);
    }
    // Offsets grow with seqs, and the other session's records lie between them.
    let offsets: Vec<i64> = page.events.iter().map(|e| e.log_offset).collect();
    ensure!(offsets.windows(2).all(|w| w[1] > w[0] + 1), "{offsets:?}");

    // The ends of the session: its first event, and a range running past its last.
    let first = recovery
        .events(
            session,
            EventRange {
                to_seq: Some(1),
                ..EventRange::default()
            },
        )
        .await?;
    assert_eq!(first.events.len(), 1);
    assert_eq!(first.events[0].kind, "SessionStarted");
    let tail = recovery
        .events(
            session,
            EventRange {
                from_seq: Some(295),
                to_seq: Some(u64::MAX),
                ..EventRange::default()
            },
        )
        .await?;
    assert_eq!(seqs(&tail.events), (295..=301).collect::<Vec<_>>());
    let beyond = recovery
        .events(
            session,
            EventRange {
                from_seq: Some(1_000),
                ..EventRange::default()
            },
        )
        .await?;
    assert!(beyond.events.is_empty() && beyond.next_cursor.is_none());

    match recovery
        .events(SessionId::new(), EventRange::default())
        .await
    {
        Err(Error::NotIndexed(_)) => {}
        other => bail!("an unknown session must be NotIndexed, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kinds_filter_keeps_only_those_kinds_across_pages() -> Result<()> {
    let stack = TestStack::new("range_kinds", 1).await?;
    let _projector = stack.spawn_projector()?;
    let (session, recovery) = long_session(&stack, 200).await?;

    let kinds = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let range = EventRange {
        from_seq: Some(10),
        to_seq: Some(150),
        kinds: kinds(&["ModelResponse"]),
        limit: Some(9),
        ..EventRange::default()
    };
    let pages = all_pages(&recovery, session, range).await?;
    let events: Vec<HistoryEvent> = pages.into_iter().flat_map(|p| p.events).collect();
    let odd: Vec<u64> = (10..=150_u64).filter(|s| !s.is_multiple_of(2)).collect();
    assert_eq!(seqs(&events), odd);
    ensure!(events.iter().all(|e| e.kind == "ModelResponse"));

    // A kind that is rare in the range: the pages go past the other kinds, to the range end.
    let started = recovery
        .events(
            session,
            EventRange {
                kinds: kinds(&["SessionStarted", "SessionEnded"]),
                limit: Some(1),
                ..EventRange::default()
            },
        )
        .await?;
    assert_eq!(seqs(&started.events), [1]);
    assert_eq!(started.next_cursor, None, "no other event of those kinds");
    let none = recovery
        .events(
            session,
            EventRange {
                from_seq: Some(2),
                kinds: kinds(&["SessionStarted"]),
                ..EventRange::default()
            },
        )
        .await?;
    assert!(none.events.is_empty() && none.next_cursor.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_follow_the_cursor_without_gaps_or_repeats() -> Result<()> {
    let stack = TestStack::new("range_pages", 1).await?;
    let _projector = stack.spawn_projector()?;
    let (session, recovery) = long_session(&stack, 250).await?;

    for limit in [1, 7, 50, 1000] {
        let range = EventRange {
            from_seq: Some(20),
            to_seq: Some(230),
            limit: Some(limit),
            ..EventRange::default()
        };
        let pages = all_pages(&recovery, session, range).await?;
        let events: Vec<u64> = pages.iter().flat_map(|p| seqs(&p.events)).collect();
        assert_eq!(events, (20..=230).collect::<Vec<_>>(), "limit {limit}");
        // Every page but the last is full; the last one says nothing remains.
        let full = usize::try_from(limit)?;
        for page in &pages[..pages.len() - 1] {
            assert_eq!(page.events.len(), full, "limit {limit}");
        }
        assert_eq!(pages.len(), 211_usize.div_ceil(full), "limit {limit}");
    }
    // A page that ends exactly at the range's end has no cursor: no empty page follows.
    let exact = recovery
        .events(
            session,
            EventRange {
                from_seq: Some(1),
                to_seq: Some(10),
                limit: Some(10),
                ..EventRange::default()
            },
        )
        .await?;
    assert_eq!(exact.events.len(), 10);
    assert_eq!(exact.next_cursor, None);

    // A cursor of one session is refused for another.
    let page = recovery
        .events(
            session,
            EventRange {
                limit: Some(5),
                ..EventRange::default()
            },
        )
        .await?;
    let cursor = page.next_cursor.context("more than five events remain")?;
    let (other, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    caught_up(&stack).await?;
    match recovery
        .events(
            other.session_id(),
            EventRange {
                cursor: Some(cursor),
                ..EventRange::default()
            },
        )
        .await
    {
        Err(Error::BadRange { code, .. }) => assert_eq!(code, "bad_cursor"),
        other => bail!("a foreign cursor must be refused, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_with_inherited_reads_its_ancestors_through_each_fork_point_then_its_own()
-> Result<()> {
    let stack = TestStack::new("range_fork", 2).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    // parent 1..=10, child forked at parent seq 6, grandchild forked at child seq 3.
    let (mut parent, _) = SessionWriter::create(Arc::clone(&log), "agent", None).await?;
    append_messages(&mut parent, "parent", 9).await?;
    let parent_id = parent.session_id();
    let child = fork_and_write(&recovery, &log, parent_id, 6, "child", 4).await?;
    let grandchild = fork_and_write(&recovery, &log, child, 3, "grandchild", 5).await?;
    // The parent goes on after the fork: none of that is inherited.
    append_messages(&mut parent, "parent", 5).await?;
    caught_up(&stack).await?;

    let inherited = EventRange {
        inherited: true,
        ..EventRange::default()
    };
    let page = recovery.events(grandchild, inherited.clone()).await?;
    assert_eq!(page.next_cursor, None);
    let got: Vec<(SessionId, u64)> = page.events.iter().map(|e| (e.session_id, e.seq)).collect();
    let mut want: Vec<(SessionId, u64)> = (1..=6).map(|s| (parent_id, s)).collect();
    want.extend((1..=3).map(|s| (child, s)));
    want.extend((1..=6).map(|s| (grandchild, s)));
    assert_eq!(got, want);
    // Each event is its own session's, opened with that session's key.
    for event in &page.events {
        let tag = match event.session_id {
            s if s == parent_id => "parent",
            s if s == child => "child",
            _ => "grandchild",
        };
        // Seq 1 is each session's start (SessionStarted, SessionForked): no message.
        if event.seq > 1 {
            assert_eq!(content_text(event), Some(text(tag, event.seq).as_str()));
        }
    }
    assert_eq!(
        page.events[6].kind, "SessionForked",
        "the child's first event"
    );
    assert_eq!(
        page.events[9].kind, "SessionForked",
        "the grandchild's first event"
    );

    // from/to apply to the session's own seqs only; the inherited prefix stays whole.
    let own_part = recovery
        .events(
            grandchild,
            EventRange {
                from_seq: Some(2),
                to_seq: Some(4),
                ..inherited.clone()
            },
        )
        .await?;
    let got: Vec<(SessionId, u64)> = own_part
        .events
        .iter()
        .map(|e| (e.session_id, e.seq))
        .collect();
    let mut want: Vec<(SessionId, u64)> = (1..=6).map(|s| (parent_id, s)).collect();
    want.extend((1..=3).map(|s| (child, s)));
    want.extend((2..=4).map(|s| (grandchild, s)));
    assert_eq!(got, want);

    // Pages across the sessions cover the same sequence, in order, once.
    for limit in [1, 4, 6] {
        let pages = all_pages(
            &recovery,
            grandchild,
            EventRange {
                limit: Some(limit),
                ..inherited.clone()
            },
        )
        .await?;
        let paged: Vec<(SessionId, u64)> = pages
            .iter()
            .flat_map(|p| p.events.iter().map(|e| (e.session_id, e.seq)))
            .collect();
        let whole: Vec<(SessionId, u64)> =
            page.events.iter().map(|e| (e.session_id, e.seq)).collect();
        assert_eq!(paged, whole, "limit {limit}");
    }

    // Without `inherited`, only the session's own events.
    let own = recovery.events(grandchild, EventRange::default()).await?;
    assert_eq!(seqs(&own.events), (1..=6).collect::<Vec<_>>());
    ensure!(own.events.iter().all(|e| e.session_id == grandchild));
    // A root session has nothing to inherit.
    let root = recovery.events(parent_id, inherited).await?;
    assert_eq!(seqs(&root.events), (1..=15).collect::<Vec<_>>());
    Ok(())
}

/// Forks `parent` at `seq`, takes the fork over and appends `count` messages of `tag`.
async fn fork_and_write(
    recovery: &Recovery,
    log: &Arc<EventLog>,
    parent: SessionId,
    seq: u64,
    tag: &str,
    count: u64,
) -> Result<SessionId> {
    let child = recovery
        .fork(parent, ForkAt::Seq(seq), "branch")
        .await?
        .envelope
        .session_id;
    let (mut writer, _) = SessionWriter::claim(Arc::clone(log), child, "branch-harness").await?;
    // The claim is a `WriterClaimed`, not a seq of the session: the next seq is still 2.
    append_messages(&mut writer, tag, count).await?;
    Ok(child)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_erased_sessions_range_reads_with_its_texts_erased() -> Result<()> {
    let stack = TestStack::new("range_erased", 1).await?;
    let _projector = stack.spawn_projector()?;
    let (session, recovery) = long_session(&stack, 20).await?;
    let range = EventRange {
        from_seq: Some(2),
        to_seq: Some(12),
        ..EventRange::default()
    };
    let before = recovery.events(session, range.clone()).await?;
    for event in &before.events {
        assert_eq!(content_text(event), Some(text("long", event.seq).as_str()));
        ensure!(event.unopened.is_empty(), "{:?}", event.unopened);
    }

    // A blank reason is refused by the library itself, whichever door calls it (HTTP, the CLI,
    // the console), and erases nothing.
    let blank = recovery.erase(session, "dpo", "  ").await;
    ensure!(
        matches!(
            blank,
            Err(sessionlog_recovery::Error::ReasonRequired { .. })
        ),
        "a blank reason answered {blank:?}"
    );
    ensure!(
        !recovery.erased_for_reading(session, false).await?,
        "a refused erasure destroyed the key"
    );

    recovery.erase(session, "dpo", "request 7").await?;
    caught_up(&stack).await?;
    let after = recovery.events(session, range).await?;
    assert_eq!(seqs(&after.events), (2..=12).collect::<Vec<_>>());
    for event in &after.events {
        let body = event.event.as_ref().context("the record is in the log")?;
        let content = match body {
            SessionEvent::UserRequest { content } | SessionEvent::ModelResponse { content, .. } => {
                content
            }
            other => bail!("unexpected event {other:?}"),
        };
        // The sealed form stays, without its ciphertext; the field says why it did not open.
        match content {
            Content::Sealed { ciphertext, .. } => ensure!(ciphertext.is_empty()),
            Content::Plain(text) => ensure!(text.is_empty(), "{text}"),
        }
        assert_eq!(
            event.unopened.get("content").map(String::as_str),
            Some("erased")
        );
    }
    // The erasure itself is in the history, readable: it holds no personal data.
    let whole = all_pages(&recovery, session, EventRange::default()).await?;
    let last = whole
        .last()
        .and_then(|p| p.events.last())
        .context("events")?;
    match &last.event {
        Some(SessionEvent::SessionErased { reason, .. }) => assert_eq!(reason, "request 7"),
        other => bail!("the last event should be the erasure, got {other:?}"),
    }
    Ok(())
}

/// A `serve-recovery` process and a client with every role.
struct Service {
    process: ServedProcess,
    http: reqwest::Client,
}

impl Service {
    async fn get(&self, path: &str) -> Result<(StatusCode, Value)> {
        get(&self.http, &format!("{}{path}", self.process.base)).await
    }
}

async fn get(http: &reqwest::Client, url: &str) -> Result<(StatusCode, Value)> {
    let response = http.get(url).send().await?;
    let status = response.status();
    let text = response.text().await?;
    let body = serde_json::from_str(&text)
        .with_context(|| format!("{url}: status {status}, body not JSON: {text}"))?;
    Ok((status, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn range_reads_over_http_need_the_reader_role_and_bad_input_is_a_400() -> Result<()> {
    let stack = TestStack::new("range_http", 2).await?;
    let _projector = stack.spawn_projector()?;
    let (session, recovery) = long_session(&stack, 12).await?;
    let service = Service {
        process: ServedProcess::start(&stack, "serve-recovery").await?,
        http: sessionlog_testkit::auth::client()?,
    };
    let events = format!("/v1/sessions/{session}/events");

    let (status, page) = service
        .get(&format!("{events}?from_seq=3&to_seq=9&limit=4"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{page}");
    let first: Vec<u64> = page["events"]
        .as_array()
        .context("events")?
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(first, [3, 4, 5, 6]);
    let item = &page["events"][0];
    for member in [
        "session_id",
        "seq",
        "kind",
        "occurred_at",
        "writer_epoch",
        "event_id",
        "log_partition",
        "log_offset",
        "event",
    ] {
        ensure!(!item[member].is_null(), "no {member} in {item}");
    }
    assert_eq!(item["session_id"], session.to_string());
    assert_eq!(item["kind"], "ModelResponse");
    assert_eq!(
        item["event"]["ModelResponse"]["content"]["Plain"],
        text("long", 3)
    );
    let cursor = page["next_cursor"].as_str().context("a cursor")?;
    let (status, rest) = service
        .get(&format!(
            "{events}?from_seq=3&to_seq=9&limit=4&cursor={cursor}"
        ))
        .await?;
    assert_eq!(status, StatusCode::OK, "{rest}");
    let second: Vec<u64> = rest["events"]
        .as_array()
        .context("events")?
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(second, [7, 8, 9]);
    ensure!(rest.get("next_cursor").is_none(), "{rest}");
    let (status, filtered) = service
        .get(&format!(
            "{events}?kinds=UserRequest,SessionStarted&to_seq=6"
        ))
        .await?;
    assert_eq!(status, StatusCode::OK, "{filtered}");
    let kinds: Vec<&str> = filtered["events"]
        .as_array()
        .context("events")?
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "SessionStarted",
            "UserRequest",
            "UserRequest",
            "UserRequest"
        ]
    );

    // Bad input: a 400 with a code that says which, never a 500.
    let too_long = "9".repeat(40);
    for (query, code) in [
        ("from_seq=9&to_seq=3", "bad_range"),
        ("from_seq=0", "bad_range"),
        ("from_seq=-1", "bad_range"),
        ("to_seq=x", "bad_range"),
        ("limit=0", "bad_limit"),
        ("limit=5000", "bad_limit"),
        (&format!("limit={too_long}"), "bad_limit"),
        ("limit=ten", "bad_limit"),
        ("cursor=not-a-cursor", "bad_cursor"),
        ("cursor=AQ", "bad_cursor"),
        ("kinds=UserRequest,Nope", "unknown_kind"),
        ("inherited=maybe", "bad_query"),
        ("limit=1&limit=2", "bad_query"),
        ("from=5", "bad_query"),
    ] {
        let (status, problem) = service.get(&format!("{events}?{query}")).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
        assert_eq!(problem["code"], code, "{query}: {problem}");
    }
    let (_, unknown_kind) = service.get(&format!("{events}?kinds=Nope")).await?;
    let detail = unknown_kind["detail"].as_str().unwrap_or_default();
    for kind in [
        "UserRequest",
        "ModelResponse",
        "SessionForked",
        "SessionErased",
    ] {
        ensure!(detail.contains(kind), "{detail} does not list {kind}");
    }
    let (status, problem) = service
        .get(&format!("/v1/sessions/{}/events", SessionId::new()))
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["code"], "unknown_session");
    let (status, _) = service.get("/v1/sessions/not-a-uuid/events").await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The reader role suffices; a caller without it is refused; another tenant sees nothing.
    let url = format!("{}{events}?to_seq=2", service.process.base);
    let reader = sessionlog_testkit::auth::client_with(&sessionlog_testkit::auth::token(
        "r",
        &[Role::Reader],
    )?)?;
    let (status, body) = get(&reader, &url).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let harness = sessionlog_testkit::auth::client_with(&sessionlog_testkit::auth::token(
        "h",
        &[Role::Harness],
    )?)?;
    let (status, body) = get(&harness, &url).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let stranger =
        sessionlog_testkit::auth::client_with(&sessionlog_testkit::auth::mint(&Grant {
            tenant: Some("another-tenant".into()),
            ..Grant::new("s", &[Role::Reader], Duration::from_secs(600))
        })?)?;
    let (status, body) = get(&stranger, &url).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // The service opened the texts above (and may hold the key); once the session is erased
    // (here, by another process) they read as erased, with a 200.
    recovery.erase(session, "dpo", "request 8").await?;
    let (status, erased) = service
        .get(&format!("{events}?from_seq=3&to_seq=3"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{erased}");
    let item = &erased["events"][0];
    assert_eq!(item["unopened"]["content"], "erased", "{item}");
    ensure!(
        !erased.to_string().contains(&text("long", 3)),
        "an erased text was answered: {erased}"
    );
    Ok(())
}

/// Runs `sessionlog events` in `stack`'s corner.
fn cli(stack: &TestStack, args: &[&str]) -> Result<std::process::Output> {
    Ok(stack.command(&[])?.arg("events").args(args).output()?)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_prints_a_range_following_the_cursor() -> Result<()> {
    let stack = TestStack::new("range_cli", 1).await?;
    let _projector = stack.spawn_projector()?;
    let (session, _) = long_session(&stack, 30).await?;
    let id = session.to_string();

    let json = cli(
        &stack,
        &[&id, "--from", "5", "--to", "24", "--limit", "3", "--json"],
    )?;
    ensure!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(json.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let printed: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert_eq!(printed, (5..=24).collect::<Vec<_>>(), "one object per line");

    let table = cli(
        &stack,
        &[
            &id,
            "--from",
            "5",
            "--to",
            "8",
            "--kinds",
            "UserRequest,ModelResponse",
        ],
    )?;
    ensure!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let table = String::from_utf8(table.stdout)?;
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 5, "a header and four events:\n{table}");
    ensure!(
        rows[0].contains("SEQ") && rows[0].contains("KIND"),
        "{table}"
    );
    ensure!(
        rows[1].contains("ModelResponse") && rows[1].contains(&text("long", 5)),
        "{table}"
    );
    ensure!(rows[2].trim_start().starts_with('6'), "{table}");

    let refused = cli(&stack, &[&id, "--kinds", "Nope"])?;
    ensure!(!refused.status.success(), "an unknown kind must fail");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        stderr.contains("Nope") && stderr.contains("UserRequest"),
        "{stderr}"
    );
    let refused = cli(&stack, &[&id, "--limit", "0"])?;
    ensure!(!refused.status.success(), "limit 0 must fail");

    let kinds: BTreeSet<String> = lines
        .iter()
        .filter_map(|l| l["kind"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["ModelResponse".to_string(), "UserRequest".to_string()])
    );
    Ok(())
}
