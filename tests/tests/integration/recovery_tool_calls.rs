//! Crash a harness at every step of a tool call, for every effect class, and prove with a
//! counting tool service that recovery performs side effects exactly as the rules allow:
//! a recorded result is never re-executed, an idempotent call with a resolver never runs twice,
//! a non-idempotent one stops for an operator, and a pure one may run again.

use anyhow::{Context, Result, bail, ensure};
use sessionlog_recovery::{
    Error, HttpResolver, InDoubtAction, Recovery, Resolution, Resolvers, ResumeBundle,
};
use sessionlog_schemas::{CallOutcome, Content, ResultSource, SessionEvent};
use sessionlog_session::SessionStatus;
use sessionlog_testkit::TestStack;
use sessionlog_testkit::recovery::{
    KilledHarness, Step, ToolService, accepted_events, assert_all_acked_accepted, end_offset,
    run_harness_until,
};
use std::sync::Arc;

/// Tokens of context a resumed harness asks for (the tests do not look at the context).
const CONTEXT_BUDGET: Option<usize> = Some(4_000);

const HARNESS: &str = env!("CARGO_BIN_EXE_tool_harness");

/// Effects the harness performed before dying at `step`: the call happens between b and c.
fn effects_before(step: Step) -> u64 {
    match step {
        Step::BeforeRequest | Step::BeforeCall => 0,
        Step::BeforeResult | Step::AfterResult => 1,
    }
}

/// Kills the harness at `step` and checks the counter and the acknowledged events.
async fn crash_at(
    stack: &TestStack,
    service: &ToolService,
    recovery: &Recovery,
    tool: &str,
    effect: &str,
    step: Step,
) -> Result<KilledHarness> {
    let run = run_harness_until(HARNESS, stack, service, tool, effect, step).await?;
    assert_eq!(
        service.effects(tool, &run.key),
        effects_before(step),
        "{effect} {step:?}: effects before recovery"
    );
    assert_all_acked_accepted(recovery, run.session, &run.acked).await?;
    Ok(run)
}

/// A resume with nothing left to settle: the only outcome allowed at steps a and d.
fn assert_nothing_in_doubt(bundle: &ResumeBundle, what: &str) {
    assert!(bundle.in_doubt.is_empty(), "{what}: {:?}", bundle.in_doubt);
    assert!(bundle.resolved.is_empty(), "{what}: {bundle:?}");
    assert!(bundle.state.pending_calls.is_empty(), "{what}: {bundle:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_call_with_a_resolver_never_runs_twice() -> Result<()> {
    let stack = TestStack::new("rec_idem", 2).await?;
    let service = ToolService::start(&["charge"]).await?;
    let mut resolvers = Resolvers::default();
    resolvers.insert(
        "charge",
        Arc::new(HttpResolver::new(service.resolver_url("charge"))),
    );
    let recovery = Recovery::connect(&stack.settings)
        .await?
        .with_resolvers(resolvers);

    for step in Step::ALL {
        let run = crash_at(&stack, &service, &recovery, "charge", "idempotent", step).await?;
        let mut bundle = recovery
            .resume(run.session, "recovered", CONTEXT_BUDGET)
            .await?;
        assert_eq!(
            bundle.epoch, 2,
            "{step:?}: the resume claims the next epoch"
        );
        match step {
            Step::BeforeRequest | Step::AfterResult => {
                assert_nothing_in_doubt(&bundle, &format!("{step:?}"));
                assert_eq!(service.lookups("charge", &run.key), 0, "{step:?}");
            }
            Step::BeforeCall => {
                // The service never saw the call: the resolver says so, and the harness may
                // re-issue it with the same key.
                let [doubt] = bundle.in_doubt.as_slice() else {
                    bail!("{step:?}: one call in doubt expected: {bundle:?}");
                };
                assert_eq!(doubt.action, InDoubtAction::ReissueWithSameKey);
                assert_eq!(
                    doubt.call.idempotency_key.as_deref(),
                    Some(run.key.as_str())
                );
                assert_eq!(service.lookups("charge", &run.key), 1);
                assert!(bundle.resolved.is_empty());
                let doubt = doubt.clone();
                let output = service.call("charge", &run.key).await?;
                // A second re-issue (say the new harness also crashed) is absorbed by the key.
                assert_eq!(service.call("charge", &run.key).await?, output);
                assert_eq!(service.effects("charge", &run.key), 1);
                let writer = bundle.writer.as_mut().context("the bundle's writer")?;
                writer
                    .append_with(
                        SessionEvent::ToolCallResult {
                            call_seq: doubt.call.seq,
                            outcome: CallOutcome::Succeeded,
                            output: Content::plain(output),
                            source: ResultSource::Executed,
                            recorded_by: None,
                            note: None,
                        },
                        Some(doubt.call.event_id),
                        Some(run.key.clone()),
                    )
                    .await?;
            }
            Step::BeforeResult => {
                // The call ran: recovery records the service's result instead of running it.
                assert!(bundle.in_doubt.is_empty(), "{bundle:?}");
                let [recorded] = bundle.resolved.as_slice() else {
                    bail!("one resolved call expected: {bundle:?}");
                };
                let SessionEvent::ToolCallResult { source, output, .. } = &recorded.envelope.event
                else {
                    bail!("a tool result expected, got {:?}", recorded.envelope.event);
                };
                assert_eq!(*source, ResultSource::Resolver);
                assert_eq!(*output, Content::plain("charge effect #1"));
                assert!(bundle.state.pending_calls.is_empty());
                let rebuilt = recovery.rebuild(run.session).await?;
                assert!(rebuilt.state.pending_calls.is_empty());
            }
        }
        assert_eq!(
            service.effects("charge", &run.key),
            effects_before(step).max(u64::from(step == Step::BeforeCall)),
            "{step:?}: effects after recovery"
        );
        // Whatever happened, a later resume finds nothing to settle and causes no effect.
        let again = recovery
            .resume(run.session, "recovered-again", CONTEXT_BUDGET)
            .await?;
        assert_nothing_in_doubt(&again, &format!("{step:?}, second resume"));
        assert!(service.effects("charge", &run.key) <= 1, "{step:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn non_idempotent_call_in_doubt_stops_until_an_operator_resolves_it() -> Result<()> {
    let stack = TestStack::new("rec_nonidem", 2).await?;
    let service = ToolService::start(&[]).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    for step in Step::ALL {
        let run = crash_at(&stack, &service, &recovery, "email", "non-idempotent", step).await?;
        let effects = effects_before(step);
        match step {
            Step::BeforeRequest | Step::AfterResult => {
                let bundle = recovery
                    .resume(run.session, "recovered", CONTEXT_BUDGET)
                    .await?;
                assert_nothing_in_doubt(&bundle, &format!("{step:?}"));
            }
            Step::BeforeCall | Step::BeforeResult => {
                let call_seq = expect_needs_resolution(&recovery, &run).await?;
                // Refused again, and the refusal appends nothing.
                let end = end_offset(&recovery, run.session).await?;
                let again = recovery
                    .resume(run.session, "recovered", CONTEXT_BUDGET)
                    .await;
                assert!(
                    matches!(&again, Err(Error::NeedsResolution { calls, .. }) if calls == &vec![call_seq]),
                    "{step:?}: {again:?}"
                );
                assert_eq!(end_offset(&recovery, run.session).await?, end);

                // The operator checks the service (the counter) and records what happened.
                recovery
                    .record_resolution(
                        run.session,
                        Resolution {
                            call_seq,
                            outcome: if effects == 1 {
                                CallOutcome::Succeeded
                            } else {
                                CallOutcome::Failed
                            },
                            output: format!("{effects} email(s) sent"),
                            operator: "ops@example.com".into(),
                            reason: "checked the mail server's log".into(),
                        },
                    )
                    .await?;
                let bundle = recovery
                    .resume(run.session, "recovered", CONTEXT_BUDGET)
                    .await?;
                assert_nothing_in_doubt(&bundle, &format!("{step:?}, after the resolution"));
            }
        }
        assert_eq!(service.effects("email", &run.key), effects, "{step:?}");
    }
    Ok(())
}

/// Resumes a session whose non-idempotent call is in doubt: expects `NeedsResolution` naming
/// the call, a `ResolutionRequired` in the log, and the session marked needs-resolution.
async fn expect_needs_resolution(recovery: &Recovery, run: &KilledHarness) -> Result<u64> {
    let before = recovery.rebuild(run.session).await?;
    let call_seq = *before
        .state
        .pending_calls
        .keys()
        .next()
        .context("a pending call")?;
    let refused = recovery
        .resume(run.session, "recovered", CONTEXT_BUDGET)
        .await;
    let Err(Error::NeedsResolution { calls, .. }) = &refused else {
        bail!("NeedsResolution expected, got {refused:?}");
    };
    ensure!(calls == &vec![call_seq], "calls {calls:?}");
    let logged = accepted_events(recovery, run.session).await?;
    ensure!(
        logged.iter().any(|e| matches!(
            e.envelope.event,
            SessionEvent::ResolutionRequired { call_seq: s, .. } if s == call_seq
        )),
        "no ResolutionRequired for seq {call_seq} in the log"
    );
    let after = recovery.rebuild(run.session).await?;
    assert_eq!(after.state.status(), SessionStatus::NeedsResolution);
    Ok(call_seq)
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_call_without_a_resolver_stops_for_an_operator() -> Result<()> {
    let stack = TestStack::new("rec_noresolver", 2).await?;
    let service = ToolService::start(&["charge"]).await?;
    // No resolver is configured for `charge`: nobody can tell whether it ran.
    let recovery = Recovery::connect(&stack.settings)
        .await?
        .with_resolvers(Resolvers::default());
    let run = crash_at(
        &stack,
        &service,
        &recovery,
        "charge",
        "idempotent",
        Step::BeforeResult,
    )
    .await?;
    expect_needs_resolution(&recovery, &run).await?;
    assert_eq!(service.effects("charge", &run.key), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn pure_call_in_doubt_may_run_again() -> Result<()> {
    let stack = TestStack::new("rec_pure", 2).await?;
    let service = ToolService::start(&[]).await?;
    let recovery = Recovery::connect(&stack.settings).await?;

    for step in Step::ALL {
        let run = crash_at(&stack, &service, &recovery, "lookup", "pure", step).await?;
        let bundle = recovery
            .resume(run.session, "recovered", CONTEXT_BUDGET)
            .await?;
        match step {
            Step::BeforeRequest | Step::AfterResult => {
                assert_nothing_in_doubt(&bundle, &format!("{step:?}"))
            }
            Step::BeforeCall | Step::BeforeResult => {
                let [doubt] = bundle.in_doubt.as_slice() else {
                    bail!("{step:?}: one call in doubt expected: {bundle:?}");
                };
                assert_eq!(doubt.action, InDoubtAction::RunAgain);
                assert_eq!(
                    doubt.call.idempotency_key.as_deref(),
                    Some(run.key.as_str())
                );
                assert!(bundle.resolved.is_empty());
            }
        }
        // Recovery itself never runs a tool: the counter is what the harness left.
        assert_eq!(
            service.effects("lookup", &run.key),
            effects_before(step),
            "{step:?}"
        );
    }
    Ok(())
}
