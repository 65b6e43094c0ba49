//! The approval and operator gates under races and forks, on the real stack: a resume judges
//! the gates on the state after its claim, a refused approval reaches the resumed harness,
//! and a fork cannot walk past a wait.

use anyhow::{Result, bail};
use sessionlog_producer::SessionWriter;
use sessionlog_recovery::{Error, ForkAt, Recovery};
use sessionlog_schemas::{Content, EffectClass, EventEnvelope, SessionEvent, TerminalOutcome};
use sessionlog_session::{Gate, Rejection};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::projector::event_log;
use sessionlog_testkit::recovery::{end_offset, raw_next};

/// Tokens of context a resumed harness asks for.
const CONTEXT_BUDGET: Option<usize> = Some(4_000);

/// A new session whose harness asked for approval `deploy-1`; its writer is still open.
async fn awaiting_approval(stack: &TestStack) -> Result<SessionWriter> {
    let (mut writer, _) = SessionWriter::create(event_log(stack).await?, "agent", None).await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy-1".into(),
            action: "deploy".into(),
            action_digest: None,
        })
        .await?;
    Ok(writer)
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_judges_the_gates_on_the_state_after_its_claim() -> Result<()> {
    let stack = TestStack::new("gate_race", 2).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    // An approval request the old harness appends after the rebuild, before the claim.
    let (mut old, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    old.user_request("deploy it").await?;
    let session = old.session_id();
    let point = recovery.prepare_resume(session).await?;
    old.append(SessionEvent::ApprovalRequested {
        approval_id: "deploy-1".into(),
        action: "deploy to production".into(),
        action_digest: None,
    })
    .await?;
    match recovery.resume_at(point, "harness-2", CONTEXT_BUDGET).await {
        Err(Error::AwaitingApproval { approval_id, .. }) => assert_eq!(approval_id, "deploy-1"),
        other => bail!("AwaitingApproval expected, got {other:?}"),
    }

    // An end the old harness appends in the same window.
    let (mut old, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    old.user_request("finish").await?;
    let session = old.session_id();
    let point = recovery.prepare_resume(session).await?;
    old.append(SessionEvent::SessionEnded {
        outcome: TerminalOutcome::Completed,
        reason: None,
    })
    .await?;
    match recovery.resume_at(point, "harness-2", CONTEXT_BUDGET).await {
        Err(Error::Ended { .. }) => {}
        other => bail!("Ended expected, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_approval_reaches_the_resumed_harness() -> Result<()> {
    let stack = TestStack::new("gate_denied", 2).await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    writer.user_request("drop the table").await?;
    writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "drop-1".into(),
            action: "DROP TABLE users".into(),
            action_digest: None,
        })
        .await?;
    let session = writer.session_id();
    drop(writer);

    let recovery = Recovery::connect(&stack.settings).await?;
    recovery
        .decide_approval(session, "drop-1", false, "alice", Some("no backups".into()))
        .await?;
    let bundle = recovery
        .resume(session, "harness-2", CONTEXT_BUDGET)
        .await?;
    let denied = bundle
        .state
        .decided_approvals
        .get("drop-1")
        .filter(|d| !d.approved)
        .ok_or_else(|| anyhow::anyhow!("the bundle's state has no record of the refusal"))?;
    // The bundle opens the session's texts for the harness that resumes it.
    assert_eq!(denied.action.as_plain(), Some("DROP TABLE users"));
    assert_eq!(denied.decided_by, "alice");
    assert_eq!(
        denied.reason.as_ref().and_then(|r| r.as_plain()),
        Some("no backups")
    );
    let context = serde_json::to_string(&bundle.context)?;
    assert!(
        context.contains("approval drop-1 denied by alice: no backups"),
        "the context view shows the refusal: {context}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_cannot_walk_past_a_wait() -> Result<()> {
    let stack = TestStack::new("gate_fork", 2).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    let asked = writer.user_request("deploy it").await?.envelope.seq;
    let requested = writer
        .append(SessionEvent::ApprovalRequested {
            approval_id: "deploy-1".into(),
            action: "deploy".into(),
            action_digest: None,
        })
        .await?
        .envelope
        .seq;
    let session = writer.session_id();

    let before = end_offset(&recovery, session).await?;
    match recovery
        .fork(session, ForkAt::Seq(requested), "agent")
        .await
    {
        Err(Error::ForkOfWaitingSession { approvals, .. }) => {
            assert_eq!(approvals, vec!["deploy-1".to_string()])
        }
        other => bail!("ForkOfWaitingSession expected, got {other:?}"),
    }
    assert_eq!(end_offset(&recovery, session).await?, before);
    // Before the request nothing waits: the fork is fine.
    recovery.fork(session, ForkAt::Seq(asked), "agent").await?;

    // A non-idempotent call in doubt waits for an operator.
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    let call = writer
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "payments.charge".into(),
                arguments: Content::plain("{\"cents\":100}"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
            None,
            Some("charge-1".into()),
        )
        .await?
        .envelope
        .seq;
    match recovery
        .fork(writer.session_id(), ForkAt::Seq(call), "agent")
        .await
    {
        Err(Error::ForkOfWaitingSession { calls, .. }) => assert_eq!(calls, vec![call]),
        other => bail!("ForkOfWaitingSession expected, got {other:?}"),
    }
    Ok(())
}

/// `envelope` signed with a key of the harness's own making, under the service's key id.
fn forged(stack: &TestStack, mut envelope: EventEnvelope) -> Result<EventEnvelope> {
    let stranger = sessionlog_http::auth::SigningKey::generate()?;
    let statement = sessionlog_session::attest::statement(&envelope).unwrap_or_default();
    let kid = sessionlog_http::auth::SigningKey::from_pem(&std::fs::read_to_string(
        stack
            .settings
            .recovery
            .signing_key_file
            .clone()
            .unwrap_or_default(),
    )?)?
    .kid()
    .to_string();
    envelope.attestation = Some(sessionlog_schemas::Attestation {
        key_id: kid,
        signature: stranger.sign(statement.as_bytes())?,
    });
    Ok(envelope)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_harness_cannot_approve_its_own_request_whoever_writes() -> Result<()> {
    let stack = TestStack::new("gate_self_approval", 2).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let raw = event_log(&stack).await?;
    let mut writer = awaiting_approval(&stack).await?;
    let session = writer.session_id();
    let request = writer.state().pending_approvals["deploy-1"].clone();
    let own = SessionEvent::ApprovalDecided {
        approval_id: "deploy-1".into(),
        approved: true,
        decided_by: "the-harness".into(),
        reason: None,
        action_digest: request.action_digest.clone(),
        request_seq: Some(request.seq),
    };
    // Through the library: its own fold refuses it before sending.
    match writer.append(own.clone()).await {
        Err(sessionlog_producer::Error::Refused(Rejection::Unsigned { .. })) => {}
        other => bail!("Unsigned expected from the library, got {other:?}"),
    }
    // Straight to Kafka, unsigned: in the log, rejected by the fold; the gate stays shut.
    raw.append(&raw_next(&recovery, session, own.clone()).await?)
        .await?;
    let rebuilt = recovery.rebuild(session).await?.state;
    assert!(rebuilt.pending_approvals.contains_key("deploy-1"));
    assert!(rebuilt.decided_approvals.is_empty());
    match recovery.resume(session, "harness-2", CONTEXT_BUDGET).await {
        Err(Error::AwaitingApproval { approval_id, .. }) => assert_eq!(approval_id, "deploy-1"),
        other => bail!("AwaitingApproval expected after an unsigned decision, got {other:?}"),
    }

    // With a signature of its own making, under the service's key id: the fold cannot check a
    // signature (it holds no keys), recovery can, and refuses to act on it.
    raw.append(&forged(&stack, raw_next(&recovery, session, own).await?)?)
        .await?;
    match recovery.resume(session, "harness-2", CONTEXT_BUDGET).await {
        Err(Error::Unverified { approvals, .. }) => assert_eq!(approvals, vec!["deploy-1"]),
        other => bail!("Unverified expected for a forged signature, got {other:?}"),
    }
    // The approver decides through the service (superseding the forgery nothing acted on):
    // now it resumes.
    recovery
        .decide_approval(session, "deploy-1", true, "alice", None)
        .await?;
    let bundle = recovery
        .resume(session, "harness-2", CONTEXT_BUDGET)
        .await?;
    let decision = &bundle.state.decided_approvals["deploy-1"];
    assert_eq!(decision.request_seq, Some(request.seq));
    assert!(
        recovery
            .notary()
            .verifies(&decision.statement, decision.attestation.as_ref())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_awaiting_an_operator_is_settled_only_by_an_operator() -> Result<()> {
    let stack = TestStack::new("gate_operator", 2).await?;
    let recovery = Recovery::connect(&stack.settings).await?;
    let raw = event_log(&stack).await?;
    let (mut writer, _) = SessionWriter::create(event_log(&stack).await?, "agent", None).await?;
    let call = writer
        .append_with(
            SessionEvent::ToolCallRequested {
                tool: "payments.charge".into(),
                arguments: Content::plain("{}"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
            None,
            Some("charge-1".into()),
        )
        .await?
        .envelope
        .seq;
    let session = writer.session_id();
    drop(writer);
    // Recovery stops the session for an operator.
    assert!(matches!(
        recovery.resume(session, "harness-2", CONTEXT_BUDGET).await,
        Err(Error::NeedsResolution { .. })
    ));
    // A new harness cannot take it over...
    match SessionWriter::claim(event_log(&stack).await?, session, "harness-3").await {
        Err(sessionlog_producer::Error::Refused(Rejection::Gated(Gate::NeedsResolution {
            calls,
        }))) => assert_eq!(calls, vec![call]),
        other => bail!("a gated claim expected, got {:?}", other.map(|(_, c)| c)),
    }
    // ...nor settle it from outside, straight to Kafka: its own result, an unsigned
    // "operator" record, are rejected by the fold.
    let result = |source| SessionEvent::ToolCallResult {
        call_seq: call,
        outcome: sessionlog_schemas::CallOutcome::Succeeded,
        output: Content::plain("done"),
        source,
        recorded_by: Some("bob".into()),
        note: None,
    };
    for source in [
        sessionlog_schemas::ResultSource::Executed,
        sessionlog_schemas::ResultSource::Operator,
    ] {
        raw.append(&raw_next(&recovery, session, result(source)).await?)
            .await?;
    }
    let rebuilt = recovery.rebuild(session).await?.state;
    assert!(rebuilt.pending_calls.contains_key(&call), "{rebuilt:?}");
    assert_eq!(
        rebuilt.status(),
        sessionlog_session::SessionStatus::NeedsResolution
    );
    // A forged signature passes the fold, which holds no keys; recovery refuses to act on it.
    let forgery = raw_next(
        &recovery,
        session,
        result(sessionlog_schemas::ResultSource::Operator),
    )
    .await?;
    raw.append(&forged(&stack, forgery)?).await?;
    match recovery.resume(session, "harness-4", CONTEXT_BUDGET).await {
        Err(Error::Unverified { calls, .. }) => assert_eq!(calls, vec![call]),
        other => bail!("Unverified expected, got {other:?}"),
    }
    recovery
        .record_resolution(
            session,
            sessionlog_recovery::Resolution {
                call_seq: call,
                outcome: sessionlog_schemas::CallOutcome::Succeeded,
                output: "charged".into(),
                operator: "carol".into(),
                reason: "the bank says so".into(),
            },
        )
        .await?;
    recovery
        .resume(session, "harness-4", CONTEXT_BUDGET)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_signing_key_a_decision_fails_before_it_fences_anyone() -> Result<()> {
    let mut stack = TestStack::new("gate_no_key", 2).await?;
    let writer = awaiting_approval(&stack).await?;
    let session = writer.session_id();
    stack.settings.recovery.signing_key_file = None;
    let recovery = Recovery::connect(&stack.settings).await?;
    let before = end_offset(&recovery, session).await?;
    match recovery
        .decide_approval(session, "deploy-1", true, "alice", None)
        .await
    {
        Err(Error::Attestation { .. }) => {}
        other => bail!("Attestation expected without a key, got {other:?}"),
    }
    assert_eq!(
        end_offset(&recovery, session).await?,
        before,
        "no claim was appended: the harness was not fenced for nothing"
    );
    Ok(())
}
