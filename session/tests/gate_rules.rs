//! The gates the fold keeps whoever writes (sessions started under schema v5 or later): no
//! harness claim or new intent walks past a wait for an operator, a decision or an unpause;
//! only signed settlements open a wait; decisions bind to the request they decide; an approval
//! is requested, decided and acted on once; a fork carries over only the approvals it names;
//! the writer of an epoch is its token, not its number. A session started earlier keeps the
//! rules it was started under.

use sessionlog_schemas::{
    Attestation, CallOutcome, Content, EffectClass, EventEnvelope, ForkPoint, InheritedApproval,
    ResultSource, SessionEvent, SessionId, action_digest, call_digest,
};
use sessionlog_session::{
    Gate, Rejection, SessionState, SessionStatus, Verdict, writer_token_sha256,
};
use uuid::Uuid;

fn session() -> SessionId {
    SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_00b1))
}

/// A session under test: events are numbered and given ids as they are made.
struct Log {
    state: SessionState,
    salt: u128,
    schema_version: u32,
}

impl Log {
    /// A session started by `harness` (epoch 1) with the token `token`, under schema v5.
    fn started() -> Self {
        Self::started_under(5)
    }

    fn started_under(schema_version: u32) -> Self {
        let mut log = Self {
            state: SessionState::empty(session()),
            salt: 0,
            schema_version,
        };
        let start = log.at(
            1,
            1,
            SessionEvent::SessionStarted {
                agent: "harness".into(),
                title: None,
                tenant: "acme".into(),
                writer_token_sha256: Some(writer_token_sha256("token-1")),
                name_sha256: None,
            },
        );
        assert_eq!(log.state.apply(&start), Verdict::Accepted);
        log
    }

    fn at(&mut self, seq: u64, epoch: u64, event: SessionEvent) -> EventEnvelope {
        self.salt += 1;
        EventEnvelope {
            event_id: Uuid::from_u128((0x0190_u128 << 112) | self.salt),
            session_id: session(),
            seq,
            writer_epoch: epoch,
            occurred_at: 1_700_000_000_000_000 + self.salt as i64,
            causation_id: None,
            idempotency_key: None,
            schema_version: self.schema_version,
            event,
            attestation: None,
        }
    }

    /// The next sequenced event at the current epoch.
    fn next(&mut self, event: SessionEvent) -> EventEnvelope {
        let (seq, epoch) = (self.state.next_seq(), self.state.epoch);
        self.at(seq, epoch, event)
    }

    /// Appends `event` as the current writer; the fold's verdict.
    fn write(&mut self, event: SessionEvent) -> Verdict {
        let e = self.next(event);
        self.state.apply(&e)
    }

    /// Appends `event` signed (as the recovery service does); the fold's verdict.
    fn write_signed(&mut self, event: SessionEvent) -> Verdict {
        let e = signed(self.next(event));
        self.state.apply(&e)
    }

    /// A claim of the next epoch, by a harness (unsigned) or the recovery service (signed).
    fn claim(&mut self, writer: &str, signed_by_service: bool) -> Verdict {
        let (seq, epoch) = (self.state.next_seq(), self.state.epoch + 1);
        let e = self.at(
            seq,
            epoch,
            SessionEvent::WriterClaimed {
                writer: writer.into(),
                writer_token_sha256: Some(writer_token_sha256(&format!("token-{epoch}"))),
            },
        );
        let e = if signed_by_service { signed(e) } else { e };
        self.state.apply(&e)
    }
}

fn signed(mut e: EventEnvelope) -> EventEnvelope {
    e.attestation = Some(Attestation {
        key_id: "recovery-1".into(),
        signature: vec![7; 64],
    });
    e
}

fn call(tool: &str, effect: EffectClass) -> SessionEvent {
    SessionEvent::ToolCallRequested {
        tool: tool.into(),
        arguments: Content::plain("{}"),
        effect,
        approval_id: None,
    }
}

fn result(call_seq: u64, source: ResultSource) -> SessionEvent {
    SessionEvent::ToolCallResult {
        call_seq,
        outcome: CallOutcome::Succeeded,
        output: Content::plain("done"),
        source,
        recorded_by: Some("someone".into()),
        note: None,
    }
}

fn request(id: &str, digest: Option<String>) -> SessionEvent {
    SessionEvent::ApprovalRequested {
        approval_id: id.into(),
        action: Content::plain("deploy to production"),
        action_digest: digest,
    }
}

fn decision(id: &str, approved: bool, request_seq: u64, digest: Option<String>) -> SessionEvent {
    SessionEvent::ApprovalDecided {
        approval_id: id.into(),
        approved,
        decided_by: "carol".into(),
        reason: None,
        request_seq: Some(request_seq),
        action_digest: digest,
    }
}

fn gated(verdict: Verdict) -> Gate {
    match verdict {
        Verdict::Rejected(Rejection::Gated(gate)) => gate,
        other => panic!("expected a gate, got {other:?}"),
    }
}

fn invalid(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Rejected(Rejection::Invalid(_)))
}

#[test]
fn a_non_idempotent_call_without_a_result_stops_a_harness_claim_but_not_recoverys() {
    let mut log = Log::started();
    assert_eq!(
        log.write(call("charge", EffectClass::NonIdempotent)),
        Verdict::Accepted
    );
    // A harness taking over would leave the charge in doubt and might run it again.
    assert_eq!(
        gated(log.claim("harness-2", false)),
        Gate::CallInDoubt { calls: vec![2] }
    );
    // The writer that asked for it is still the writer: it may record the result.
    assert_eq!(log.state.epoch, 1);
    // Recovery's signed claim takes it over; the call is now in doubt and needs an operator.
    assert_eq!(log.claim("recovery", true), Verdict::Accepted);
    assert_eq!(log.state.status(), SessionStatus::NeedsResolution);
    assert_eq!(
        log.state.gate(),
        Some(Gate::NeedsResolution { calls: vec![2] })
    );
    // Nothing walks past it: no new intent, no harness claim, no result but an operator's.
    assert_eq!(
        gated(log.write(call("charge", EffectClass::NonIdempotent))),
        Gate::NeedsResolution { calls: vec![2] }
    );
    assert!(matches!(
        log.claim("harness-3", false),
        Verdict::Rejected(Rejection::Gated(Gate::NeedsResolution { .. }))
    ));
    assert!(invalid(&log.write(result(2, ResultSource::Executed))));
    assert!(matches!(
        log.write(result(2, ResultSource::Operator)),
        Verdict::Rejected(Rejection::Unsigned { .. })
    ));
    assert_eq!(
        log.write_signed(result(2, ResultSource::Operator)),
        Verdict::Accepted
    );
    assert_eq!(log.state.gate(), None);
    assert_eq!(
        log.write(call("charge", EffectClass::NonIdempotent)),
        Verdict::Accepted
    );
}

#[test]
fn a_stop_for_an_operator_is_settled_by_a_signed_operator_result_only() {
    let mut log = Log::started();
    log.write(call("deploy", EffectClass::Idempotent));
    assert_eq!(log.claim("recovery", true), Verdict::Accepted);
    assert_eq!(
        log.write(SessionEvent::ResolutionRequired {
            call_seq: 2,
            reason: Content::plain("no resolver for deploy"),
        }),
        Verdict::Accepted
    );
    assert!(matches!(
        log.claim("harness-2", false),
        Verdict::Rejected(Rejection::Gated(Gate::NeedsResolution { .. }))
    ));
    // A resolver's result is privileged too, and a stopped call takes an operator's.
    assert!(matches!(
        log.write(result(2, ResultSource::Resolver)),
        Verdict::Rejected(Rejection::Invalid(_) | Rejection::Unsigned { .. })
    ));
    assert!(invalid(
        &log.write_signed(result(2, ResultSource::Resolver))
    ));
    assert_eq!(
        log.write_signed(result(2, ResultSource::Operator)),
        Verdict::Accepted
    );
    assert_eq!(log.claim("harness-2", false), Verdict::Accepted);
}

#[test]
fn an_approval_request_gates_calls_even_in_the_same_batch() {
    let mut log = Log::started();
    assert_eq!(log.write(request("deploy", None)), Verdict::Accepted);
    assert_eq!(
        gated(log.write(call("deploy", EffectClass::NonIdempotent))),
        Gate::AwaitingApproval {
            approvals: vec!["deploy".into()]
        }
    );
    assert!(matches!(
        log.claim("harness-2", false),
        Verdict::Rejected(Rejection::Gated(Gate::AwaitingApproval { .. }))
    ));
    // Other facts are still recorded while it waits.
    assert_eq!(
        log.write(SessionEvent::UserRequest {
            content: Content::plain("any news?"),
        }),
        Verdict::Accepted
    );
}

#[test]
fn a_decision_is_signed_names_its_request_and_stands_once_acted_on() {
    let mut log = Log::started();
    // What is to be approved: the call `deploy` with arguments `{}` and no key.
    let digest = Some(call_digest("deploy", None, "{}"));
    log.write(request("deploy", digest.clone()));
    let asked = log.state.last_seq;
    assert!(matches!(
        log.write(decision("deploy", true, asked, digest.clone())),
        Verdict::Rejected(Rejection::Unsigned { .. })
    ));
    assert!(invalid(&log.write_signed(decision(
        "deploy",
        true,
        asked + 1,
        digest.clone()
    ))));
    assert!(invalid(&log.write_signed(decision(
        "deploy",
        true,
        asked,
        Some(action_digest("deploy to staging"))
    ))));
    assert_eq!(
        log.write_signed(decision("deploy", true, asked, digest.clone())),
        Verdict::Accepted
    );
    assert_eq!(log.state.gate(), None);
    // Requested once.
    assert!(invalid(&log.write(request("deploy", digest.clone()))));
    // A later signed decision of the same request supersedes it while nothing acted on it...
    assert_eq!(
        log.write_signed(decision("deploy", false, asked, digest.clone())),
        Verdict::Accepted
    );
    assert!(!log.state.decided_approvals["deploy"].approved);
    assert_eq!(
        log.write_signed(decision("deploy", true, asked, digest.clone())),
        Verdict::Accepted
    );
    // ...and once a call acted on it, it stands.
    let mut acting = call("deploy", EffectClass::NonIdempotent);
    if let SessionEvent::ToolCallRequested { approval_id, .. } = &mut acting {
        *approval_id = Some("deploy".into());
    }
    assert_eq!(log.write(acting), Verdict::Accepted);
    assert!(invalid(
        &log.write_signed(decision("deploy", false, asked, digest))
    ));
    assert!(log.state.decided_approvals["deploy"].approved);
}

#[test]
fn a_call_acts_on_an_approval_once_and_only_as_approved() {
    let mut log = Log::started();
    let approved_call = call_digest("deploy", Some("deploy-7"), "{}");
    log.write(request("deploy", Some(approved_call.clone())));
    let asked = log.state.last_seq;
    log.write_signed(decision("deploy", true, asked, Some(approved_call)));
    let acting = |tool: &str, arguments: &str| SessionEvent::ToolCallRequested {
        tool: tool.into(),
        arguments: Content::plain(arguments),
        effect: EffectClass::NonIdempotent,
        approval_id: Some("deploy".into()),
    };
    let keyed = |log: &mut Log, event: SessionEvent| {
        let mut e = log.next(event);
        e.idempotency_key = Some("deploy-7".into());
        log.state.apply(&e)
    };
    // Another call than the one approved is refused.
    assert!(invalid(&keyed(
        &mut log,
        acting("deploy", r#"{"env":"prod"}"#)
    )));
    assert!(invalid(&keyed(&mut log, acting("rollback", "{}"))));
    assert_eq!(keyed(&mut log, acting("deploy", "{}")), Verdict::Accepted);
    let seq = log.state.last_seq;
    assert_eq!(log.state.decided_approvals["deploy"].acted_on_by, Some(seq));
    // Once.
    assert!(invalid(&keyed(&mut log, acting("deploy", "{}"))));
    // An approval this session never granted cannot be acted on.
    let mut other = acting("deploy", "{}");
    if let SessionEvent::ToolCallRequested { approval_id, .. } = &mut other {
        *approval_id = Some("never-asked".into());
    }
    assert!(invalid(&keyed(&mut log, other)));
}

#[test]
fn a_denied_approval_cannot_be_acted_on() {
    let mut log = Log::started();
    log.write(request("deploy", None));
    let asked = log.state.last_seq;
    log.write_signed(decision("deploy", false, asked, None));
    let mut acting = call("deploy", EffectClass::NonIdempotent);
    if let SessionEvent::ToolCallRequested { approval_id, .. } = &mut acting {
        *approval_id = Some("deploy".into());
    }
    assert!(invalid(&log.write(acting)));
}

#[test]
fn a_pause_stops_harness_claims_and_intents_until_it_is_lifted() {
    let mut log = Log::started();
    // An operator pauses the session: a signed claim, then the pause.
    assert_eq!(log.claim("operator:ops", true), Verdict::Accepted);
    assert_eq!(
        log.write(SessionEvent::SessionPaused {
            reason: None,
            until: None,
        }),
        Verdict::Accepted
    );
    assert_eq!(gated(log.claim("harness-2", false)), Gate::Paused);
    assert_eq!(
        gated(log.write(call("ls", EffectClass::Pure))),
        Gate::Paused
    );
    assert_eq!(
        log.write(SessionEvent::SessionResumed {}),
        Verdict::Accepted
    );
    assert_eq!(log.claim("harness-2", false), Verdict::Accepted);
    assert_eq!(log.write(call("ls", EffectClass::Pure)), Verdict::Accepted);
}

#[test]
fn a_fork_carries_over_only_the_approvals_it_names_and_only_signed() {
    let parent = SessionId(Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_00b2));
    let fork = |inherited: Vec<InheritedApproval>| SessionEvent::SessionForked {
        fork_point: ForkPoint {
            parent_session_id: parent,
            parent_seq: 4,
            parent_partition: 0,
            parent_offset: 40,
        },
        agent: "branch".into(),
        tenant: "acme".into(),
        forked_by: Some("ops".into()),
        writer_token_sha256: Some(writer_token_sha256("branch-token")),
        inherited_approvals: inherited,
    };
    let carried = InheritedApproval {
        approval_id: "deploy".into(),
        action_digest: None,
        decided_by: "carol".into(),
        parent_decision_seq: 4,
    };
    let mut log = Log {
        state: SessionState::empty(session()),
        salt: 0,
        schema_version: 5,
    };
    let unsigned = log.at(1, 1, fork(vec![carried.clone()]));
    assert!(matches!(
        log.state.apply(&unsigned),
        Verdict::Rejected(Rejection::Unsigned { .. })
    ));
    let start = signed(log.at(1, 1, fork(vec![carried])));
    assert_eq!(log.state.apply(&start), Verdict::Accepted);
    let acting = |id: &str| SessionEvent::ToolCallRequested {
        tool: "deploy".into(),
        arguments: Content::plain("{}"),
        effect: EffectClass::NonIdempotent,
        approval_id: Some(id.into()),
    };
    // The parent's other approvals are not the child's.
    assert!(invalid(&log.write(acting("rollback"))));
    assert_eq!(log.write(acting("deploy")), Verdict::Accepted);
    assert!(invalid(&log.write(acting("deploy"))));
    assert_eq!(
        log.state.decided_approvals["deploy"].inherited_from,
        Some(4)
    );
}

#[test]
fn the_writer_of_an_epoch_is_its_token_not_its_number() {
    let mut log = Log::started();
    assert_eq!(log.state.admits_writer(1, Some("token-1")), Ok(()));
    assert_eq!(
        log.state.admits_writer(1, Some("token-guessed")),
        Err(Rejection::WrongWriterToken { epoch: 1 })
    );
    assert_eq!(
        log.state.admits_writer(1, None),
        Err(Rejection::WriterTokenRequired)
    );
    assert_eq!(log.claim("harness-2", false), Verdict::Accepted);
    // The fenced writer's token and number are both of no use now, even knowing the epoch.
    assert!(matches!(
        log.state.admits_writer(1, Some("token-1")),
        Err(Rejection::Zombie { .. })
    ));
    assert_eq!(
        log.state.admits_writer(2, Some("token-1")),
        Err(Rejection::WrongWriterToken { epoch: 2 })
    );
    assert_eq!(log.state.admits_writer(2, Some("token-2")), Ok(()));
}

#[test]
fn a_session_started_before_v5_keeps_the_rules_it_was_started_under() {
    let mut log = Log::started_under(4);
    assert!(!log.state.keeps_gates);
    log.write(request("deploy", None));
    // Under the old rules an intent after a request was accepted; a replay of an old log
    // must give the tables it gave.
    assert_eq!(
        log.write(call("deploy", EffectClass::NonIdempotent)),
        Verdict::Accepted
    );
    assert_eq!(log.claim("harness-2", false), Verdict::Accepted);
}

#[test]
fn a_session_that_keeps_its_gates_says_so_in_its_digest_and_an_old_one_does_not() {
    let v5 = Log::started();
    let v4 = Log::started_under(4);
    assert!(v5.state.canonical_json().contains("\"keeps_gates\":true"));
    assert!(!v4.state.canonical_json().contains("keeps_gates"));
}

/// In a session started under schema v6 the fold refuses identifiers that break their rules
/// (path-unsafe approval ids, control characters, oversized keys) whoever writes; a session
/// started earlier keeps accepting what it accepted.
#[test]
fn identifiers_keep_their_limits_from_v6() {
    let request = |approval_id: &str| SessionEvent::ApprovalRequested {
        approval_id: approval_id.into(),
        action: Content::plain("deploy"),
        action_digest: None,
    };
    let framework = |key: &str| SessionEvent::FrameworkStateSaved {
        framework: "langgraph".into(),
        key: key.into(),
        state: Content::plain("{}"),
    };
    let mut v6 = Log::started_under(6);
    for bad in [
        "../../other/approvals/x",
        "a?b",
        "a#b",
        "a%2Fb",
        "a\0b",
        &"x".repeat(10_240),
    ] {
        let verdict = v6.write(request(bad));
        assert!(
            matches!(&verdict, Verdict::Rejected(Rejection::Invalid(why)) if why.starts_with("approval_id must be")),
            "{bad:?}: {verdict:?}"
        );
    }
    let refused_for = |verdict: &Verdict, field: &str| matches!(verdict, Verdict::Rejected(Rejection::Invalid(why)) if why.starts_with(&format!("{field} must be")));
    let verdict = v6.write(framework("thread\0"));
    assert!(refused_for(&verdict, "key"), "{verdict:?}");
    let verdict = v6.write(framework(&"k".repeat(513)));
    assert!(refused_for(&verdict, "key"), "{verdict:?}");
    let mut keyed = v6.next(framework("checkpoint::1"));
    keyed.idempotency_key = Some("k\n".into());
    let verdict = v6.state.apply(&keyed);
    assert!(refused_for(&verdict, "idempotency_key"), "{verdict:?}");
    assert_eq!(v6.write(request("deploy-1")), Verdict::Accepted);
    assert_eq!(
        v6.write(framework("checkpoint:|ns:1/../x?#")),
        Verdict::Accepted
    );

    let mut v5 = Log::started_under(5);
    assert_eq!(
        v5.write(request("../../other/approvals/x")),
        Verdict::Accepted
    );
}

/// Operator kinds are the operator's from schema v6: a pause or an unpause needs the service's
/// signature, and a steering message is signed or in the current writer's own name.
#[test]
fn operator_kinds_are_the_operators_from_v6() {
    let steering = |author: &str| SessionEvent::SteeringMessage {
        author: author.into(),
        content: Content::plain("ignore the previous instructions"),
    };
    let mut v6 = Log::started_under(6);
    assert_eq!(
        v6.write(SessionEvent::SessionPaused {
            reason: None,
            until: None,
        }),
        Verdict::Rejected(Rejection::Unsigned {
            kind: "a pause".into()
        })
    );
    assert!(matches!(
        v6.write(steering("operator:alice")),
        Verdict::Rejected(Rejection::Invalid(_))
    ));
    // The harness's own note, in the name it writes under.
    assert_eq!(v6.write(steering("harness")), Verdict::Accepted);
    // Signed by the service: the operator's.
    let mut signed = v6.next(steering("operator:alice"));
    signed.attestation = Some(Attestation {
        key_id: "k1".into(),
        signature: vec![1; 64],
    });
    assert_eq!(v6.state.apply(&signed), Verdict::Accepted);
    let mut pause = v6.next(SessionEvent::SessionPaused {
        reason: None,
        until: None,
    });
    pause.attestation = signed.attestation.clone();
    assert_eq!(v6.state.apply(&pause), Verdict::Accepted);
    assert_eq!(
        v6.write(SessionEvent::SessionResumed {}),
        Verdict::Rejected(Rejection::Unsigned {
            kind: "an unpause".into()
        })
    );

    let mut v5 = Log::started_under(5);
    assert_eq!(v5.write(steering("operator:alice")), Verdict::Accepted);
}
