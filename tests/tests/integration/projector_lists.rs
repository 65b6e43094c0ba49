//! The lists the projector maintains instead of scanning `sessions`: a session's children
//! (`session_children`) and the sessions awaiting an approval or an operator
//! (`sessions_awaiting`). Recovery reads them; a replay writes the same rows.

use anyhow::Result;
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Error, ForkAt, Recovery, Resolution, StuckSession};
use sessionlog_schemas::{CallOutcome, Content, EffectClass, SessionEvent, SessionId};
use sessionlog_store::verify;
use sessionlog_testkit::projector::{
    assert_same_tables, event_log, replay_into, store, wait_caught_up,
};
use sessionlog_testkit::{TestStack, wait_for};
use std::future::Future;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(90);

/// Waits until `list` shows `session` (`want`) or no longer shows it (`!want`).
async fn until_listed<F, Fut>(what: &str, session: SessionId, want: bool, list: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Vec<StuckSession>, Error>>,
{
    wait_for(what, PATIENCE, || {
        let listed = list();
        async move {
            let found = listed.await?.iter().any(|s| s.session_id == session);
            Ok((found == want).then_some(()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn children_and_waiting_sessions_are_listed_and_replay_the_same() -> Result<()> {
    let stack = TestStack::new("plists", 2).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    // A parent forked twice: at a seq and at a checkpoint.
    let (mut parent, _) = SessionWriter::create(log.clone(), "agent", Some("parent")).await?;
    parent.user_request("one").await?;
    let checkpoint = parent.checkpoint(None).await?;
    parent.user_request("two").await?;
    let parent_id = parent.session_id();
    let a = recovery.fork(parent_id, ForkAt::Seq(2), "branch-a").await?;
    let b = recovery
        .fork(
            parent_id,
            ForkAt::Checkpoint(checkpoint.envelope.seq),
            "branch-b",
        )
        .await?;
    let mut expected = vec![
        (a.envelope.session_id, 2),
        (b.envelope.session_id, checkpoint.envelope.seq),
    ];
    expected.sort();
    let children = wait_for("both forks to be listed", PATIENCE, || {
        let recovery = &recovery;
        let expected = &expected;
        async move {
            let children = recovery.lineage(parent_id).await?.children;
            Ok((children == *expected).then_some(children))
        }
    })
    .await?;
    assert_eq!(children, expected);
    // A fork of a fork is its parent's child only.
    let grandchild = recovery
        .fork(a.envelope.session_id, ForkAt::Seq(1), "branch-a-a")
        .await?;
    wait_for("the grandchild to be listed", PATIENCE, || {
        let recovery = &recovery;
        async move {
            let children = recovery.lineage(a.envelope.session_id).await?.children;
            Ok((children == [(grandchild.envelope.session_id, 1)]).then_some(()))
        }
    })
    .await?;
    assert_eq!(recovery.lineage(parent_id).await?.children, expected);

    // A session awaiting an approval is listed until the decision is logged.
    let (mut asking, _) = SessionWriter::create(log.clone(), "agent", None).await?;
    asking
        .append(SessionEvent::ApprovalRequested {
            approval_id: "ship-1".into(),
            action: "ship it".into(),
            action_digest: None,
        })
        .await?;
    let asking_id = asking.session_id();
    drop(asking);
    until_listed("the approval wait to be listed", asking_id, true, || {
        recovery.sessions_awaiting_approval()
    })
    .await?;
    let listed = recovery.sessions_awaiting_approval().await?;
    let entry = listed.iter().find(|s| s.session_id == asking_id);
    assert_eq!(entry.map(|s| s.status.as_str()), Some("awaiting_approval"));
    assert!(
        recovery
            .sessions_needing_resolution()
            .await?
            .iter()
            .all(|s| s.session_id != asking_id),
        "an approval wait is not an operator's"
    );
    recovery
        .decide_approval(asking_id, "ship-1", true, "alice", None)
        .await?;
    until_listed("the approval wait to end", asking_id, false, || {
        recovery.sessions_awaiting_approval()
    })
    .await?;

    // A session whose in-doubt call needs an operator is listed until it is resolved.
    let (mut paying, _) = SessionWriter::create(log.clone(), "agent", None).await?;
    let call = paying
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "pay".into(),
                arguments: Content::plain("{\"invoice\": 9}"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
            None,
            Some("invoice-9".into()),
        )
        .await?;
    let paying_id = paying.session_id();
    drop(paying);
    let refused = recovery.resume(paying_id, "harness-2", Some(1_000)).await;
    assert!(
        matches!(refused, Err(Error::NeedsResolution { .. })),
        "{refused:?}"
    );
    until_listed("the operator wait to be listed", paying_id, true, || {
        recovery.sessions_needing_resolution()
    })
    .await?;
    recovery
        .record_resolution(
            paying_id,
            Resolution {
                call_seq: call.envelope.seq,
                outcome: CallOutcome::Succeeded,
                output: "paid".into(),
                operator: "bob".into(),
                reason: "the bank shows it".into(),
            },
        )
        .await?;
    until_listed("the operator wait to end", paying_id, false, || {
        recovery.sessions_needing_resolution()
    })
    .await?;

    // One session is left waiting, so the replay below compares a live row too.
    let (mut still, _) = SessionWriter::create(log.clone(), "agent", None).await?;
    still
        .append(SessionEvent::ApprovalRequested {
            approval_id: "later".into(),
            action: "wait for me".into(),
            action_digest: None,
        })
        .await?;
    let still_id = still.session_id();
    drop(still);
    until_listed("the last wait to be listed", still_id, true, || {
        recovery.sessions_awaiting_approval()
    })
    .await?;

    // A replay of the log writes exactly the same lists.
    let live = store(&stack).await?;
    wait_caught_up(&stack, &live, Duration::from_secs(60)).await?;
    let ks = live.keyspace().to_string();
    let clean = format!("{ks}_clean");
    replay_into(&stack, &clean).await?;
    assert_same_tables(&live, &ks, &clean).await?;
    let rows = |table: &str, digests: &[verify::TableDigest]| {
        digests
            .iter()
            .find(|t| t.table == table)
            .map_or(0, |t| t.rows)
    };
    let digests = verify::digest_keyspace(&live, &clean).await?;
    assert_eq!(rows("session_children", &digests), 3);
    assert_eq!(rows("sessions_awaiting", &digests), 1);
    Ok(())
}

/// The projector writes a batch's list rows before its session rows (the session row is the
/// batch's commit point), so for a moment a session can be in `sessions_awaiting` while its row
/// still says it runs: the list must not show it until the row agrees (seen in CI: an operator's
/// list showed an in-doubt session as `running`). The rows are written here by hand, in that
/// order, to hold the moment still.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_list_shows_a_session_only_once_its_row_says_it_waits() -> Result<()> {
    let stack = TestStack::new("plists_row", 1).await?;
    let store = store(&stack).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let ks = &stack.settings.cql.keyspace;
    let session = SessionId(uuid::Uuid::now_v7());
    store
        .cql()
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.sessions_awaiting (waiting_for, session_id, since_seq, since_us) \
                 VALUES ('operator', ?, 2, 0)"
            ),
            (session.0,),
        )
        .await?;
    let set_status = |status: &'static str| {
        let store = &store;
        async move {
            store
                .cql()
                .query_unpaged(
                    format!(
                        "INSERT INTO {ks}.sessions (session_id, status, last_seq) VALUES (?, ?, 2)"
                    ),
                    (session.0, status),
                )
                .await
        }
    };
    let listed = |stuck: Vec<StuckSession>| {
        stuck
            .into_iter()
            .find(|s| s.session_id == session)
            .map(|s| s.status)
    };

    // The list row alone: no session row has committed it yet.
    assert_eq!(listed(recovery.sessions_needing_resolution().await?), None);
    set_status("running").await?;
    assert_eq!(listed(recovery.sessions_needing_resolution().await?), None);
    set_status("needs_resolution").await?;
    assert_eq!(
        listed(recovery.sessions_needing_resolution().await?),
        Some("needs_resolution".to_string())
    );
    // Listed under the operator's wait only, not as awaiting an approval.
    assert_eq!(listed(recovery.sessions_awaiting_approval().await?), None);
    Ok(())
}
