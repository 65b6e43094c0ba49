//! Unit and property tests of the session fold: ordering, duplicates, gaps, stale epochs,
//! claims racing, and that a state snapshot resumes the fold exactly.

use proptest::prelude::*;
use sessionlog_schemas::{
    CallOutcome, Content, EffectClass, EventEnvelope, ResultSource, SessionEvent, SessionId,
    TerminalOutcome,
};
use sessionlog_session::{Rejection, SessionState, SessionStatus, Verdict, fold};
use uuid::Uuid;

fn session() -> SessionId {
    SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001))
}

/// Builds an envelope with a deterministic event id derived from (seq, epoch, salt).
fn ev(seq: u64, epoch: u64, salt: u64, event: SessionEvent) -> EventEnvelope {
    EventEnvelope {
        event_id: Uuid::from_u128(((seq as u128) << 64) | ((epoch as u128) << 32) | salt as u128),
        session_id: session(),
        seq,
        writer_epoch: epoch,
        occurred_at: 1_700_000_000_000_000 + seq as i64,
        causation_id: None,
        idempotency_key: None,
        schema_version: 1,
        event,
        attestation: None,
    }
}

fn started() -> SessionEvent {
    SessionEvent::SessionStarted {
        agent: "test".into(),
        title: None,
        tenant: sessionlog_schemas::DEFAULT_TENANT.into(),
        writer_token_sha256: None,
        name_sha256: None,
    }
}

fn user(text: &str) -> SessionEvent {
    SessionEvent::UserRequest {
        content: Content::plain(text),
    }
}

fn claim(writer: &str) -> SessionEvent {
    SessionEvent::WriterClaimed {
        writer: writer.into(),
        writer_token_sha256: None,
    }
}

fn apply_all(events: &[EventEnvelope]) -> (SessionState, Vec<Verdict>) {
    let mut state = SessionState::empty(session());
    let verdicts = events.iter().map(|e| state.apply(e)).collect();
    (state, verdicts)
}

#[test]
fn a_single_writer_history_is_accepted_in_order() {
    let events = vec![
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("hello")),
        ev(
            3,
            1,
            0,
            SessionEvent::ModelResponse {
                model: "m".into(),
                tokens_in: 10,
                tokens_out: 5,
                cost_micros: 7,
                started_at: 0,
                content: Content::plain("hi"),
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            },
        ),
        ev(
            4,
            1,
            0,
            SessionEvent::ToolCallRequested {
                tool: "shell".into(),
                arguments: Content::plain("ls"),
                effect: EffectClass::Pure,
                approval_id: None,
            },
        ),
    ];
    let (state, verdicts) = apply_all(&events);
    assert!(verdicts.iter().all(Verdict::is_accepted), "{verdicts:?}");
    assert_eq!(state.last_seq, 4);
    assert_eq!(state.tokens_in, 10);
    assert_eq!(state.cost_micros, 7);
    assert_eq!(state.pending_calls.len(), 1);
    assert_eq!(state.status(), SessionStatus::Running);
}

#[test]
fn events_before_the_start_are_rejected() {
    let (_, verdicts) = apply_all(&[ev(1, 1, 0, user("early"))]);
    assert_eq!(verdicts, vec![Verdict::Rejected(Rejection::NotStarted)]);
}

#[test]
fn a_second_start_is_rejected() {
    let (_, verdicts) = apply_all(&[ev(1, 1, 0, started()), ev(2, 1, 0, started())]);
    assert_eq!(verdicts[1], Verdict::Rejected(Rejection::AlreadyStarted));
}

#[test]
fn a_gap_is_rejected_and_the_next_seq_still_fits() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(3, 1, 0, user("skipped ahead")),
        ev(2, 1, 0, user("in order")),
    ]);
    assert_eq!(
        verdicts[1],
        Verdict::Rejected(Rejection::Gap {
            expected: 2,
            got: 3
        })
    );
    assert!(verdicts[2].is_accepted());
    assert_eq!(state.last_seq, 2);
}

#[test]
fn a_retry_is_a_duplicate_and_a_different_event_at_a_taken_seq_conflicts() {
    let first = ev(2, 1, 0, user("once"));
    let other = ev(2, 1, 9, user("someone else"));
    let (state, verdicts) = apply_all(&[ev(1, 1, 0, started()), first.clone(), first, other]);
    assert_eq!(verdicts[2], Verdict::Duplicate);
    assert_eq!(
        verdicts[3],
        Verdict::Rejected(Rejection::SeqConflict { seq: 2 })
    );
    assert_eq!(state.last_seq, 2);
}

#[test]
fn a_claim_fences_the_older_epoch() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("before takeover")),
        ev(3, 2, 0, claim("harness-b")),
        ev(3, 1, 0, user("zombie")),
        ev(3, 2, 1, user("new writer")),
    ]);
    assert!(verdicts[2].is_accepted());
    assert_eq!(
        verdicts[3],
        Verdict::Rejected(Rejection::Zombie {
            epoch: 1,
            current: 2
        })
    );
    assert!(verdicts[4].is_accepted());
    assert_eq!(state.epoch, 2);
    assert_eq!(state.writer.as_deref(), Some("harness-b"));
    assert_eq!(state.last_seq, 3);
}

#[test]
fn racing_claims_of_one_epoch_the_first_in_the_log_wins() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 2, 1, claim("a")),
        ev(2, 2, 2, claim("b")),
        ev(2, 2, 3, user("from a or b")),
    ]);
    assert!(verdicts[1].is_accepted());
    assert_eq!(
        verdicts[2],
        Verdict::Rejected(Rejection::StaleClaim {
            epoch: 2,
            current: 2
        })
    );
    assert_eq!(state.writer.as_deref(), Some("a"));
}

#[test]
fn writing_at_an_unclaimed_epoch_is_rejected() {
    let (_, verdicts) = apply_all(&[ev(1, 1, 0, started()), ev(2, 5, 0, user("jumped"))]);
    assert_eq!(
        verdicts[1],
        Verdict::Rejected(Rejection::UnclaimedEpoch {
            epoch: 5,
            current: 1
        })
    );
}

#[test]
fn tool_results_must_answer_a_pending_call_and_only_once() {
    let call = SessionEvent::ToolCallRequested {
        tool: "deploy".into(),
        arguments: Content::plain("v2"),
        effect: EffectClass::NonIdempotent,
        approval_id: None,
    };
    let result = |call_seq| SessionEvent::ToolCallResult {
        call_seq,
        outcome: CallOutcome::Succeeded,
        output: Content::plain("ok"),
        source: ResultSource::Executed,
        recorded_by: None,
        note: None,
    };
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, call),
        ev(3, 1, 0, result(2)),
        ev(4, 1, 0, result(2)),
        ev(4, 1, 1, result(9)),
    ]);
    assert!(verdicts[2].is_accepted());
    assert!(matches!(
        verdicts[3],
        Verdict::Rejected(Rejection::Invalid(_))
    ));
    assert!(matches!(
        verdicts[4],
        Verdict::Rejected(Rejection::Invalid(_))
    ));
    assert!(state.pending_calls.is_empty());
}

#[test]
fn resolution_and_approval_gate_the_status() {
    let (state, _) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(
            2,
            1,
            0,
            SessionEvent::ToolCallRequested {
                tool: "pay".into(),
                arguments: Content::plain("$5"),
                effect: EffectClass::NonIdempotent,
                approval_id: None,
            },
        ),
        ev(
            3,
            1,
            0,
            SessionEvent::ResolutionRequired {
                call_seq: 2,
                reason: "no resolver".into(),
            },
        ),
    ]);
    assert_eq!(state.status(), SessionStatus::NeedsResolution);

    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(
            2,
            1,
            0,
            SessionEvent::ApprovalRequested {
                approval_id: "deploy-prod".into(),
                action: "deploy".into(),
                action_digest: None,
            },
        ),
    ]);
    assert!(verdicts.iter().all(Verdict::is_accepted));
    assert_eq!(state.status(), SessionStatus::AwaitingApproval);
}

#[test]
fn nothing_but_erasure_follows_the_end() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(
            2,
            1,
            0,
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Completed,
                reason: None,
            },
        ),
        ev(3, 1, 0, user("too late")),
        ev(
            3,
            1,
            1,
            SessionEvent::SessionErased {
                requested_by: "dpo".into(),
                reason: "request".into(),
            },
        ),
    ]);
    assert_eq!(verdicts[2], Verdict::Rejected(Rejection::AfterTerminal));
    assert!(verdicts[3].is_accepted());
    assert_eq!(state.status(), SessionStatus::Erased);
}

/// A request to pay: a side effect that may have happened.
fn pay() -> SessionEvent {
    SessionEvent::ToolCallRequested {
        tool: "pay".into(),
        arguments: Content::plain("$5"),
        effect: EffectClass::NonIdempotent,
        approval_id: None,
    }
}

fn retract(retracted_seq: u64) -> SessionEvent {
    SessionEvent::EventRetracted {
        retracted_seq,
        retracted_by: "openai-agents:pop_item".into(),
    }
}

fn invalid_reason(v: &Verdict) -> String {
    match v {
        Verdict::Rejected(Rejection::Invalid(reason)) => reason.clone(),
        other => panic!("expected an invalid rejection, got {other:?}"),
    }
}

#[test]
fn a_retraction_names_an_earlier_event_once() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("first")),
        ev(3, 1, 0, user("second")),
        // Itself, a future seq and seq 0: nothing this session holds before it.
        ev(4, 1, 1, retract(4)),
        ev(4, 1, 2, retract(9)),
        ev(4, 1, 3, retract(0)),
        ev(4, 1, 0, retract(3)),
        ev(5, 1, 1, retract(3)),
        // The retraction itself cannot be withdrawn.
        ev(5, 1, 2, retract(4)),
        ev(5, 1, 0, retract(2)),
    ]);
    for i in [3, 4, 5] {
        let reason = invalid_reason(&verdicts[i]);
        assert!(reason.contains("earlier event"), "{reason}");
        assert!(reason.contains("1..=3"), "{reason}");
    }
    assert!(verdicts[6].is_accepted(), "{:?}", verdicts[6]);
    let reason = invalid_reason(&verdicts[7]);
    assert!(reason.contains("already retracted (by seq 4)"), "{reason}");
    let reason = invalid_reason(&verdicts[8]);
    assert!(reason.contains("cannot be retracted"), "{reason}");
    assert!(verdicts[9].is_accepted(), "{:?}", verdicts[9]);
    assert_eq!(state.last_seq, 5);
    assert_eq!(
        state.retracted,
        std::collections::BTreeMap::from([(2, 5), (3, 4)])
    );
    assert!(state.is_retracted(3) && !state.is_retracted(4));
    assert!(
        state
            .canonical_json()
            .contains(r#""retracted":{"2":5,"3":4}"#)
    );
}

#[test]
fn a_retraction_leaves_pending_calls_and_totals_alone() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, model_response(10, 5, 7)),
        ev(3, 1, 0, pay()),
        ev(4, 1, 0, retract(3)),
        ev(5, 1, 0, retract(2)),
        ev(
            6,
            1,
            0,
            SessionEvent::ToolCallResult {
                call_seq: 3,
                outcome: CallOutcome::Succeeded,
                output: Content::plain("paid"),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
        ),
    ]);
    assert!(verdicts.iter().all(Verdict::is_accepted), "{verdicts:?}");
    // The call was a fact while it was pending, and its result still answers it.
    assert!(state.pending_calls.is_empty());
    assert_eq!((state.tool_calls, state.model_calls), (1, 1));
    assert_eq!(
        (state.tokens_in, state.tokens_out, state.cost_micros),
        (10, 5, 7)
    );

    let (state, _) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, pay()),
        ev(3, 1, 0, retract(2)),
    ]);
    assert!(state.pending_calls.contains_key(&2));
}

#[test]
fn a_retraction_after_the_end_is_refused_and_a_session_without_one_keeps_its_digest() {
    let (_, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("hi")),
        ev(
            3,
            1,
            0,
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Completed,
                reason: None,
            },
        ),
        ev(4, 1, 0, retract(2)),
    ]);
    assert_eq!(verdicts[3], Verdict::Rejected(Rejection::AfterTerminal));
    let (state, _) = apply_all(&[ev(1, 1, 0, started()), ev(2, 1, 0, user("hi"))]);
    assert!(!state.canonical_json().contains("retracted"));
}

fn framework_state(framework: &str, key: &str) -> SessionEvent {
    SessionEvent::FrameworkStateSaved {
        framework: framework.into(),
        key: key.into(),
        state: Content::plain(r#"{"v":1,"channel_values":{"messages":"gAWV"}}"#),
    }
}

/// A framework's saved state is the framework's: the fold accepts it when it names its
/// framework and key, keeps nothing of it (the state is what any other event of no meaning to
/// the fold leaves), and it is retractable like any event.
#[test]
fn a_framework_state_needs_a_framework_and_a_key_and_changes_nothing_else() {
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("hi")),
        ev(3, 1, 1, framework_state("", "checkpoint::1")),
        ev(3, 1, 2, framework_state("langgraph", "")),
        ev(3, 1, 0, framework_state("langgraph", "checkpoint::1")),
    ]);
    for (i, empty) in [(2, "framework \"\""), (3, "key \"\"")] {
        let reason = invalid_reason(&verdicts[i]);
        assert!(
            reason.contains("names its framework and its key"),
            "{reason}"
        );
        assert!(reason.contains(empty), "{reason}");
    }
    assert!(verdicts[4].is_accepted(), "{:?}", verdicts[4]);
    assert_eq!(state.last_seq, 3);
    // The same as a user request at that seq: seq, time and history move, nothing else.
    let (as_if_a_turn, _) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, user("hi")),
        ev(3, 1, 0, user("something")),
    ]);
    assert_eq!(state, as_if_a_turn);
    assert!(!state.canonical_json().contains("langgraph"));

    // Withdrawn by a retraction (delete_thread, prune), like any event.
    let (state, verdicts) = apply_all(&[
        ev(1, 1, 0, started()),
        ev(2, 1, 0, framework_state("langgraph", "checkpoint::1")),
        ev(3, 1, 0, framework_state("langgraph", "writes::1:task:0")),
        ev(4, 1, 0, retract(2)),
        ev(5, 1, 0, retract(3)),
    ]);
    assert!(verdicts.iter().all(Verdict::is_accepted), "{verdicts:?}");
    assert_eq!(
        state.retracted,
        std::collections::BTreeMap::from([(2, 4), (3, 5)])
    );
}

#[test]
fn the_digest_names_the_events_not_just_their_effect() {
    let log = [ev(1, 1, 0, started()), ev(2, 1, 0, user("hi"))];
    let mut other = log.clone();
    other[1].event_id = Uuid::from_u128(42);
    let a = fold(&log).expect("folds");
    let b = fold(&other).expect("folds");
    assert_eq!(a.last_seq, b.last_seq);
    assert_ne!(a.digest(), b.digest());
}

#[test]
fn a_checkpoint_is_verified_when_its_digest_matches_the_fold() {
    let mut writer_view = SessionState::empty(session());
    let start = ev(1, 1, 0, started());
    let req = ev(2, 1, 0, user("x"));
    writer_view.apply(&start);
    writer_view.apply(&req);
    let good = ev(
        3,
        1,
        0,
        SessionEvent::Checkpoint {
            state_digest: writer_view.digest(),
            workspace_revision: None,
        },
    );
    let bad = ev(
        4,
        1,
        0,
        SessionEvent::Checkpoint {
            state_digest: "00".repeat(32),
            workspace_revision: None,
        },
    );
    let (state, _) = apply_all(&[start, req, good]);
    assert!(state.last_checkpoint.as_ref().is_some_and(|c| c.verified()));
    let mut state = state;
    state.apply(&bad);
    assert!(!state.last_checkpoint.as_ref().is_some_and(|c| c.verified()));
}

// ---------------------------------------------------------------------------------------
// Properties over random multi-writer logs.

/// One step of a random log: which writer acts and what it tries.
#[derive(Clone, Debug)]
enum Step {
    /// Writer `w` appends its next event (its own idea of the next seq).
    Append(usize),
    /// Writer `w` re-sends one of its earlier events (a retry).
    Retry(usize, usize),
    /// Writer `w` claims the epoch after the highest it has seen.
    Claim(usize),
    /// Writer `w` skips a seq (a bug or a lost event).
    Skip(usize),
    /// Writer `w` retracts the `i`-th seq before its next (accepted or not, as the fold says).
    Retract(usize, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize).prop_map(Step::Append),
        2 => (0..3usize, 0..50usize).prop_map(|(w, i)| Step::Retry(w, i)),
        1 => (0..3usize).prop_map(Step::Claim),
        1 => (0..3usize).prop_map(Step::Skip),
        1 => (0..3usize, 0..50u64).prop_map(|(w, i)| Step::Retract(w, i)),
    ]
}

/// Turns steps into a log: each writer keeps its own (possibly stale) view of epoch and seq.
fn log_of(steps: &[Step]) -> Vec<EventEnvelope> {
    struct W {
        epoch: u64,
        next: u64,
        sent: Vec<EventEnvelope>,
    }
    let mut writers: Vec<W> = (0..3)
        .map(|_| W {
            epoch: 1,
            next: 2,
            sent: Vec::new(),
        })
        .collect();
    let mut log = vec![ev(1, 1, 0, started())];
    let mut max_epoch = 1;
    for (salt, s) in steps.iter().enumerate() {
        let salt = salt as u64 + 1;
        match *s {
            Step::Append(w) => {
                let wr = &mut writers[w];
                let e = ev(wr.next, wr.epoch, salt, user("step"));
                wr.next += 1;
                wr.sent.push(e.clone());
                log.push(e);
            }
            Step::Retry(w, i) => {
                let wr = &writers[w];
                if !wr.sent.is_empty() {
                    log.push(wr.sent[i % wr.sent.len()].clone());
                }
            }
            Step::Claim(w) => {
                max_epoch += 1;
                let wr = &mut writers[w];
                wr.epoch = max_epoch;
                log.push(ev(wr.next, wr.epoch, salt, claim(&format!("w{w}"))));
            }
            Step::Skip(w) => writers[w].next += 1,
            Step::Retract(w, i) => {
                let wr = &mut writers[w];
                let e = ev(wr.next, wr.epoch, salt, retract(i % wr.next));
                wr.next += 1;
                wr.sent.push(e.clone());
                log.push(e);
            }
        }
    }
    log
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Accepted seqs are exactly 1..=last_seq, in log order, with no holes.
    #[test]
    fn accepted_seqs_are_gap_free(steps in prop::collection::vec(step(), 0..120)) {
        let log = log_of(&steps);
        let (state, verdicts) = apply_all(&log);
        let accepted: Vec<u64> = log.iter().zip(&verdicts)
            .filter(|(e, v)| v.is_accepted() && !matches!(e.event, SessionEvent::WriterClaimed { .. }))
            .map(|(e, _)| e.seq)
            .collect();
        let expected: Vec<u64> = (1..=state.last_seq).collect();
        prop_assert_eq!(accepted, expected);
    }

    /// Accepted epochs never go down, and a sequenced event is accepted only at the current epoch.
    #[test]
    fn no_write_of_a_fenced_epoch_is_accepted(steps in prop::collection::vec(step(), 0..120)) {
        let log = log_of(&steps);
        let mut state = SessionState::empty(session());
        for e in &log {
            let before = state.epoch;
            let v = state.apply(e);
            prop_assert!(state.epoch >= before);
            if v.is_accepted() && !matches!(e.event, SessionEvent::WriterClaimed { .. }) && before > 0 {
                prop_assert_eq!(e.writer_epoch, before);
            }
            if matches!(e.event, SessionEvent::WriterClaimed { .. }) && v.is_accepted() {
                prop_assert!(e.writer_epoch > before);
            }
        }
    }

    /// Re-delivering any accepted events again, anywhere later, changes nothing.
    #[test]
    fn duplicates_are_harmless(steps in prop::collection::vec(step(), 0..80), picks in prop::collection::vec(any::<prop::sample::Index>(), 0..20)) {
        let log = log_of(&steps);
        let (clean, verdicts) = apply_all(&log);
        let accepted: Vec<&EventEnvelope> = log.iter().zip(&verdicts).filter(|(_, v)| v.is_accepted()).map(|(e, _)| e).collect();
        let mut noisy = log.clone();
        for p in &picks {
            noisy.push(p.get(&accepted).to_owned().clone());
        }
        let (with_dups, dup_verdicts) = apply_all(&noisy);
        for v in &dup_verdicts[log.len()..] {
            prop_assert_eq!(v, &Verdict::Duplicate);
        }
        prop_assert_eq!(clean.digest(), with_dups.digest());
    }

    /// Folding from a serialised snapshot taken anywhere gives the state and the verdicts of
    /// folding from the start: this is what recovery does with a checkpoint, and what the
    /// projector does with a stored session row, restoring the duplicate window (which the
    /// snapshot leaves out) from the accepted events.
    #[test]
    fn a_snapshot_resumes_the_fold_exactly(steps in prop::collection::vec(step(), 0..120), cut in any::<prop::sample::Index>()) {
        let log = log_of(&steps);
        let cut = cut.index(log.len() + 1);
        let (full, full_verdicts) = apply_all(&log);
        let (prefix, prefix_verdicts) = apply_all(&log[..cut]);
        let mut resumed: SessionState = serde_json::from_str(&prefix.canonical_json()).unwrap();
        resumed.remember_recent(
            log[..cut].iter().zip(&prefix_verdicts)
                .filter(|(_, v)| v.is_accepted())
                .map(|(e, _)| (e.seq, e.event_id)),
        );
        for (e, expected) in log[cut..].iter().zip(&full_verdicts[cut..]) {
            prop_assert_eq!(&resumed.apply(e), expected);
        }
        prop_assert_eq!(&full, &resumed);
    }

    /// The fold is a pure function: `fold` over the same log twice gives the same digest.
    #[test]
    fn the_fold_is_deterministic(steps in prop::collection::vec(step(), 0..60)) {
        let log = log_of(&steps);
        let a = fold(&log).map(|s| s.digest());
        let b = fold(&log).map(|s| s.digest());
        prop_assert_eq!(a, b);
    }
}

fn model_response(tokens_in: u64, tokens_out: u64, cost_micros: u64) -> SessionEvent {
    SessionEvent::ModelResponse {
        model: "m".into(),
        tokens_in,
        tokens_out,
        cost_micros,
        started_at: 0,
        content: Content::plain("hi"),
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        provider: None,
    }
}

#[test]
fn totals_that_would_overflow_reject_the_event_instead_of_panicking() {
    for (i, huge) in [
        model_response(u64::MAX, 0, 0),
        model_response(0, u64::MAX, 0),
        model_response(0, 0, u64::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut state, verdicts) =
            apply_all(&[ev(1, 1, 0, started()), ev(2, 1, 0, model_response(1, 1, 1))]);
        assert!(verdicts.iter().all(Verdict::is_accepted));
        let before = state.clone();
        let verdict = state.apply(&ev(3, 1, i as u64, huge));
        match verdict {
            Verdict::Rejected(Rejection::Invalid(reason)) => {
                assert!(reason.contains("overflow"), "{reason}")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert_eq!(state, before, "a rejected event leaves the state as it was");
        // The seq stays free for a sane event.
        assert!(
            state
                .apply(&ev(3, 1, 9, model_response(2, 2, 2)))
                .is_accepted()
        );
        assert_eq!(
            (state.tokens_in, state.tokens_out, state.cost_micros),
            (3, 3, 3)
        );
    }
}
