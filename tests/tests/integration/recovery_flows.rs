//! Operator flows of the recovery service on the real stack: the approval gate, resolving an
//! in-doubt call end to end, forks (isolation, lineage, diff), and bad input that must fail
//! with the right error and append nothing.

use anyhow::{Context, Result, bail};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Error, ForkAt, Recovery, Resolution};
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, SessionEvent, SessionId, TerminalOutcome,
};
use sessionlog_testkit::projector::{event_log, store, wait_caught_up};
use sessionlog_testkit::recovery::{accepted_events, end_offset};
use sessionlog_testkit::{TestStack, wait_for};
use std::collections::HashSet;
use std::time::Duration;
use uuid::Uuid;

/// Tokens of context a resumed harness asks for (the tests do not look at the context).
const CONTEXT_BUDGET: Option<usize> = Some(4_000);

/// Event ids of `session`'s accepted history, read from the log.
async fn accepted_ids(recovery: &Recovery, session: SessionId) -> Result<HashSet<Uuid>> {
    Ok(accepted_events(recovery, session)
        .await?
        .into_iter()
        .map(|e| e.envelope.event_id)
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_awaiting_approval_resumes_only_after_the_decision_is_logged() -> Result<()> {
    let stack = TestStack::new("rec_approval", 2).await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    writer.user_request("deploy it").await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy-1".into(),
            action: "deploy to production".into(),
            action_digest: None,
        })
        .await?;
    let session = writer.session_id();
    drop(writer); // the harness died waiting for the human

    let recovery = Recovery::connect(&stack.settings).await?;
    let end = end_offset(&recovery, session).await?;
    let refused = recovery.resume(session, "harness-2", CONTEXT_BUDGET).await;
    match &refused {
        Err(Error::AwaitingApproval { approval_id, .. }) => assert_eq!(approval_id, "deploy-1"),
        other => bail!("AwaitingApproval expected, got {other:?}"),
    }
    assert_eq!(
        end_offset(&recovery, session).await?,
        end,
        "a refused resume appends nothing (no claim)"
    );

    recovery
        .decide_approval(session, "deploy-1", true, "alice", Some("reviewed".into()))
        .await?;
    let decided = accepted_events(&recovery, session).await?;
    assert!(decided.iter().any(|e| matches!(
        &e.envelope.event,
        SessionEvent::ApprovalDecided { approval_id, approved: true, decided_by, .. }
            if approval_id == "deploy-1" && decided_by == "alice"
    )));
    let bundle = recovery
        .resume(session, "harness-2", CONTEXT_BUDGET)
        .await?;
    assert!(bundle.state.pending_approvals.is_empty());
    assert!(bundle.in_doubt.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_doubt_call_is_listed_resolved_by_an_operator_and_then_resumable() -> Result<()> {
    let stack = TestStack::new("rec_resolve", 2).await?;
    let _projector = stack.spawn_projector()?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    writer.user_request("pay the invoice").await?;
    let call = writer
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "pay".into(),
                arguments: Content::plain("{\"invoice\": 7}"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
            None,
            Some("invoice-7".into()),
        )
        .await?;
    let session = writer.session_id();
    let call_seq = call.envelope.seq;
    drop(writer); // died before the result was recorded

    let recovery = Recovery::connect(&stack.settings).await?;
    let refused = recovery.resume(session, "harness-2", CONTEXT_BUDGET).await;
    assert!(
        matches!(&refused, Err(Error::NeedsResolution { calls, .. }) if calls == &vec![call_seq]),
        "{refused:?}"
    );

    // The operators' list comes from the projection: wait for it to show the session.
    let listed = |want: bool| {
        let recovery = &recovery;
        move || async move {
            let stuck = recovery.sessions_needing_resolution().await?;
            let found = stuck.iter().find(|s| s.session_id == session).cloned();
            Ok(match (found, want) {
                (Some(s), true) => Some(Some(s)),
                (None, false) => Some(None),
                _ => None,
            })
        }
    };
    let stuck = wait_for(
        "the session to be listed",
        Duration::from_secs(90),
        listed(true),
    )
    .await?
    .context("listed")?;
    assert_eq!(stuck.status, "needs_resolution");

    // A resolution for a call that is not in doubt is refused and appends nothing.
    let end = end_offset(&recovery, session).await?;
    let resolution = |seq| Resolution {
        call_seq: seq,
        outcome: CallOutcome::Succeeded,
        output: "paid once".into(),
        operator: "bob".into(),
        reason: "the bank shows one payment".into(),
    };
    let wrong = recovery.record_resolution(session, resolution(1)).await;
    assert!(
        matches!(wrong, Err(Error::NotInDoubt { call_seq: 1, .. })),
        "{wrong:?}"
    );
    assert_eq!(end_offset(&recovery, session).await?, end);

    let recorded = recovery
        .record_resolution(session, resolution(call_seq))
        .await?;
    assert_eq!(recorded.envelope.causation_id, Some(call.envelope.event_id));
    let bundle = recovery
        .resume(session, "harness-2", CONTEXT_BUDGET)
        .await?;
    assert!(bundle.state.pending_calls.is_empty());
    assert!(bundle.in_doubt.is_empty());
    // Once projected, the session leaves the operators' list.
    wait_for(
        "the session to leave the list",
        Duration::from_secs(90),
        listed(false),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn forks_are_isolated_and_have_lineage_and_a_diff() -> Result<()> {
    let stack = TestStack::new("rec_fork", 2).await?;
    let _projector = stack.spawn_projector()?;
    let log = event_log(&stack).await?;
    let (mut parent, _) = SessionWriter::create(log, "agent", Some("parent")).await?;
    parent.user_request("first").await?;
    let checkpoint = parent.checkpoint(None).await?;
    let parent_id = parent.session_id();

    let recovery = Recovery::connect(&stack.settings).await?;
    let first = recovery
        .fork(
            parent_id,
            ForkAt::Checkpoint(checkpoint.envelope.seq),
            "forker",
        )
        .await?;
    let child = first.envelope.session_id;
    assert_ne!(child, parent_id);
    assert_eq!((first.envelope.seq, first.envelope.writer_epoch), (1, 1));
    let SessionEvent::SessionForked { fork_point, .. } = &first.envelope.event else {
        bail!("the child's first event is {:?}", first.envelope.event);
    };
    assert_eq!(fork_point.parent_session_id, parent_id);
    assert_eq!(fork_point.parent_seq, checkpoint.envelope.seq);
    assert_eq!(fork_point.parent_offset, checkpoint.position.offset);
    assert_eq!(fork_point.parent_partition, checkpoint.position.partition);

    // Both branches go on; neither sees the other's events.
    let parent_after = [
        parent.user_request("parent goes on").await?,
        parent.close(TerminalOutcome::Completed, None).await?,
    ];
    let mut bundle = recovery
        .resume(child, "child-harness", CONTEXT_BUDGET)
        .await?;
    let child_writer = bundle.writer.as_mut().context("the child's writer")?;
    let child_after = [child_writer.user_request("child goes on").await?];
    assert_eq!(child_after[0].envelope.seq, child_writer.next_seq() - 1);
    assert!(
        child_after[0].envelope.seq < parent_after[0].envelope.seq,
        "the child numbers its own events from 1"
    );

    let parent_ids = accepted_ids(&recovery, parent_id).await?;
    let child_ids = accepted_ids(&recovery, child).await?;
    for e in &parent_after {
        assert!(parent_ids.contains(&e.envelope.event_id));
        assert!(!child_ids.contains(&e.envelope.event_id));
    }
    for e in &child_after {
        assert!(child_ids.contains(&e.envelope.event_id));
        assert!(!parent_ids.contains(&e.envelope.event_id));
    }
    let child_state = recovery.rebuild(child).await?.state;
    assert_eq!(child_state.parent.as_ref(), Some(fork_point));
    assert_eq!(
        child_state.epoch, 2,
        "the child's own claim, not the parent's epoch"
    );
    assert!(
        child_state.terminal.is_none(),
        "the parent's end is not the child's"
    );

    // A grandchild, to see more than one generation of lineage.
    let grandchild = recovery
        .fork(child, ForkAt::Seq(child_after[0].envelope.seq), "forker")
        .await?
        .envelope
        .session_id;
    let lineage = recovery.lineage(grandchild).await?;
    let ancestors: Vec<(SessionId, u64)> = lineage
        .ancestors
        .iter()
        .map(|p| (p.parent_session_id, p.parent_seq))
        .collect();
    assert_eq!(
        ancestors,
        vec![
            (child, child_after[0].envelope.seq),
            (parent_id, checkpoint.envelope.seq)
        ]
    );
    // Children come from the projection: wait for it.
    let store = store(&stack).await?;
    wait_caught_up(&stack, &store, Duration::from_secs(90)).await?;
    let parent_lineage = recovery.lineage(parent_id).await?;
    assert!(parent_lineage.ancestors.is_empty());
    assert_eq!(
        parent_lineage.children,
        vec![(child, checkpoint.envelope.seq)]
    );
    assert_eq!(
        recovery.lineage(child).await?.children,
        vec![(grandchild, child_after[0].envelope.seq)]
    );

    let diff = recovery.diff(child).await?;
    assert_eq!(&diff.fork_point, fork_point);
    let ids = |events: &[sessionlog_recovery::LoggedEvent]| -> Vec<Uuid> {
        events.iter().map(|e| e.envelope.event_id).collect()
    };
    assert_eq!(
        ids(&diff.parent_only),
        parent_after
            .iter()
            .map(|a| a.envelope.event_id)
            .collect::<Vec<_>>()
    );
    let child_only = ids(&diff.child_only);
    assert!(child_only.contains(&child_after[0].envelope.event_id));
    assert!(
        !child_only.contains(&first.envelope.event_id),
        "the fork event is the shared base"
    );
    assert!(
        parent_after
            .iter()
            .all(|a| !child_only.contains(&a.envelope.event_id))
    );
    Ok(())
}

/// One bad request: what it was, what recovery answered, and the error it should have been.
type Check = (&'static str, Result<(), Error>, fn(&Error) -> bool);

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_fails_with_the_right_error_and_appends_nothing() -> Result<()> {
    // One partition: every session below shares it, so one end offset covers them all.
    let stack = TestStack::new("rec_bad", 1).await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    let request = writer.user_request("hello").await?;
    writer.checkpoint(None).await?;
    let session = writer.session_id();
    let last_seq = writer.state().last_seq;

    let recovery = Recovery::connect(&stack.settings).await?;
    let end = end_offset(&recovery, session).await?;
    let unknown = SessionId::new();

    let checks: Vec<Check> = vec![
        (
            "rebuild an unknown session",
            recovery.rebuild(unknown).await.map(drop),
            |e| matches!(e, Error::UnknownSession(_)),
        ),
        (
            "resume an unknown session",
            recovery
                .resume(unknown, "h", CONTEXT_BUDGET)
                .await
                .map(drop),
            |e| matches!(e, Error::UnknownSession(_)),
        ),
        (
            "fork an unknown session",
            recovery.fork(unknown, ForkAt::Seq(1), "f").await.map(drop),
            |e| matches!(e, Error::UnknownSession(_)),
        ),
        (
            "fork beyond the end",
            recovery
                .fork(session, ForkAt::Seq(last_seq + 5), "f")
                .await
                .map(drop),
            |e| matches!(e, Error::BadForkPoint { .. }),
        ),
        (
            "fork at seq 0",
            recovery.fork(session, ForkAt::Seq(0), "f").await.map(drop),
            |e| matches!(e, Error::BadForkPoint { .. }),
        ),
        (
            "fork at a non-checkpoint as a checkpoint",
            recovery
                .fork(session, ForkAt::Checkpoint(request.envelope.seq), "f")
                .await
                .map(drop),
            |e| matches!(e, Error::BadForkPoint { .. }),
        ),
        (
            "resolve a call that is not in doubt",
            recovery
                .record_resolution(
                    session,
                    Resolution {
                        call_seq: request.envelope.seq,
                        outcome: CallOutcome::Failed,
                        output: String::new(),
                        operator: "bob".into(),
                        reason: "typo".into(),
                    },
                )
                .await
                .map(drop),
            |e| matches!(e, Error::NotInDoubt { .. }),
        ),
        (
            "decide no such approval",
            recovery
                .decide_approval(session, "nope", true, "alice", None)
                .await
                .map(drop),
            |e| matches!(e, Error::NoSuchApproval { .. }),
        ),
        (
            "diff a session that is not a fork",
            recovery.diff(session).await.map(drop),
            |e| matches!(e, Error::BadForkPoint { .. }),
        ),
    ];
    for (what, outcome, expected) in checks {
        match outcome {
            Err(e) if expected(&e) => assert!(e.is_client_error(), "{what}: {e}"),
            other => bail!("{what}: unexpected {other:?}"),
        }
    }
    assert_eq!(
        end_offset(&recovery, session).await?,
        end,
        "nothing was appended"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn resumes_beyond_the_limit_wait_their_turn_instead_of_failing() -> Result<()> {
    let stack = TestStack::new("rec_turns", 2).await?;
    let log = event_log(&stack).await?;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (mut writer, _) =
            SessionWriter::create(std::sync::Arc::clone(&log), "agent", None).await?;
        writer.user_request("carry on").await?;
        sessions.push(writer.session_id());
    }
    let mut settings = stack.settings.clone();
    settings.recovery.max_concurrent_resumes = 1;
    let recovery = std::sync::Arc::new(Recovery::connect(&settings).await?);

    // The first resume holds the only turn from its rebuild until its claim is answered.
    let first = recovery.prepare_resume(sessions[0]).await?;
    let second = tokio::spawn({
        let recovery = std::sync::Arc::clone(&recovery);
        let session = sessions[1];
        async move { recovery.resume(session, "harness-2", CONTEXT_BUDGET).await }
    });
    wait_for(
        "the second resume to queue for a turn",
        Duration::from_secs(30),
        || async { Ok((recovery.resumes_waiting() == 1).then_some(())) },
    )
    .await?;
    assert!(
        !second.is_finished() && recovery.resumes_waiting() == 1,
        "a resume beyond max_concurrent_resumes waits while the limit is taken"
    );
    let bundle = recovery
        .resume_at(first, "harness-2", CONTEXT_BUDGET)
        .await?;
    assert_eq!(bundle.epoch, 2, "the first resume claimed the next epoch");
    // Its turn given back, the waiting resume runs and succeeds: it waited, it did not fail.
    let waited = tokio::time::timeout(Duration::from_secs(60), second)
        .await
        .context("the waiting resume never got its turn")???;
    assert_eq!(waited.epoch, 2);
    Ok(())
}
