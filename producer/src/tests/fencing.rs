//! Fencing: a writer another writer took the session from learns it, and nothing it sends
//! afterwards enters the session.

use super::*;
use crate::testing::Operation;
use crate::{Error, SessionWriter};
use proptest::prelude::*;
use sessionlog_schemas::{EffectClass, EventEnvelope, SessionEvent, testing};
use sessionlog_session::{Rejection, Verdict};
use std::collections::HashSet;
use std::sync::Arc;

#[tokio::test]
async fn a_claim_through_the_same_log_fences_the_old_writer_before_it_sends() {
    let topic = topic();
    let log = process(&topic);
    let mut old = started(&log).await;
    let session = old.session_id();
    let (mut new, claim) = SessionWriter::claim(Arc::clone(&log), session, "new")
        .await
        .expect("claimed");
    assert_eq!(claim.envelope.writer_epoch, 2);
    let records = topic.records(old.partition()).len();
    let refused = old.user_request("too late").await;
    assert_fenced(&refused, 1, 2);
    assert_eq!(
        topic.records(old.partition()).len(),
        records,
        "nothing was sent"
    );
    new.user_request("mine now")
        .await
        .expect("the new writer writes");
}

#[tokio::test]
async fn a_writer_of_another_process_is_fenced_at_its_next_confirmed_append() {
    let topic = topic();
    let (here, there) = (process(&topic), process(&topic));
    let mut old = started(&here).await;
    let session = old.session_id();
    SessionWriter::claim(there, session, "new")
        .await
        .expect("claimed elsewhere");
    // Blind to the other process until it reads the log: acknowledged, and a zombie write.
    let zombie = old.user_request("unaware").await.expect("acknowledged");
    let checkpoint = old.checkpoint(None).await;
    assert_fenced(&checkpoint, 1, 2);
    let (state, verdicts) = folded(&topic, session).await;
    assert_eq!(state.epoch, 2);
    let zombie_verdict = verdicts
        .iter()
        .find(|(position, _)| *position == zombie.position)
        .map(|(_, verdict)| verdict.clone());
    assert!(
        matches!(
            zombie_verdict,
            Some(Verdict::Rejected(Rejection::Zombie { .. }))
        ),
        "{zombie_verdict:?}"
    );
    assert_eq!(
        state.last_checkpoint, None,
        "the fenced checkpoint is not the session's"
    );
    // Having learnt it, the writer sends nothing more.
    let records = topic.records(old.partition()).len();
    let again = old.user_request("still here").await;
    assert!(matches!(again, Err(Error::Fenced { .. })), "{again:?}");
    assert_eq!(topic.records(old.partition()).len(), records);
}

#[tokio::test]
async fn a_tool_call_of_a_writer_fenced_elsewhere_is_never_answered_ok() {
    let topic = topic();
    let (here, there) = (process(&topic), process(&topic));
    let mut old = started(&here).await;
    SessionWriter::claim(there, old.session_id(), "new")
        .await
        .expect("claimed elsewhere");
    // An intent: confirmed before the harness is told to run the tool.
    let call = old
        .append(testing::tool_call(
            "charge_card",
            EffectClass::NonIdempotent,
        ))
        .await;
    assert_fenced(&call, 1, 2);
    let (state, _) = folded(&topic, old.session_id()).await;
    assert!(state.pending_calls.is_empty(), "{:?}", state.pending_calls);
    assert!(
        old.state().pending_calls.is_empty(),
        "the writer's state is the log's"
    );
}

#[tokio::test]
async fn a_checkpoint_sent_just_after_a_rival_claim_landed_is_answered_fenced() {
    let topic = topic();
    let log = process(&topic);
    let mut old = started(&log).await;
    let session = old.session_id();
    // A claim by a raw producer reaches the partition between the writer's own check and its
    // send: only the read-back can tell.
    let rival = EventEnvelope::new(
        session,
        old.next_seq(),
        2,
        SessionEvent::WriterClaimed {
            writer: "rival".into(),
            writer_token_sha256: None,
        },
    );
    topic.before(Operation::Send, move |topic| {
        topic
            .append_envelope(&rival)
            .expect("the rival claim lands");
    });
    let checkpoint = old.checkpoint(None).await;
    assert_fenced(&checkpoint, 1, 2);
    let (state, _) = folded(&topic, session).await;
    assert_eq!((state.epoch, state.last_checkpoint), (2, None));
}

/// What one step of [`no_confirmed_answer_is_for_an_event_the_log_rejected`] does.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Process `.0` claims the session (its writer, if any, replaced by the claimant).
    Claim(usize),
    /// Process `.0`'s writer appends without confirmation.
    Append(usize),
    /// Process `.0`'s writer appends, confirmed.
    Confirmed(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..2usize).prop_map(Step::Claim),
        (0..2usize).prop_map(Step::Append),
        (0..2usize).prop_map(Step::Confirmed),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two processes take a session from each other and write in any order: every confirmed
    /// append answered Ok is accepted by the log's fold, a writer answered `Fenced` is one a
    /// later epoch superseded, and no event of a superseded epoch enters the history.
    #[test]
    fn no_confirmed_answer_is_for_an_event_the_log_rejected(
        steps in proptest::collection::vec(step(), 1..24)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let topic = topic();
            let processes = [process(&topic), process(&topic)];
            let first = started(&processes[0]).await;
            let session = first.session_id();
            let mut writers = [Some(first), None];
            let mut confirmed = HashSet::new();
            for step in steps {
                match step {
                    Step::Claim(p) => {
                        let claimed =
                            SessionWriter::claim(Arc::clone(&processes[p]), session, "p").await;
                        let (writer, _) = claimed.expect("an uncontested claim wins");
                        writers[p] = Some(writer);
                    }
                    Step::Append(p) | Step::Confirmed(p) => {
                        let Some(writer) = writers[p].as_mut() else { continue };
                        let event = testing::user_request("step");
                        let answer = match step {
                            Step::Confirmed(_) => writer.append_with_confirmed(event, None, None).await,
                            _ => writer.append(event).await,
                        };
                        match answer {
                            Ok(appended) if matches!(step, Step::Confirmed(_)) => {
                                confirmed.insert(appended.envelope.event_id);
                            }
                            Ok(_) => {}
                            Err(Error::Fenced { epoch, current }) => {
                                prop_assert!(epoch < current, "{epoch} < {current}");
                            }
                            Err(e) => prop_assert!(false, "unexpected: {e}"),
                        }
                    }
                }
            }
            let mut state = sessionlog_session::SessionState::empty(session);
            let mut accepted = HashSet::new();
            for (_, envelope) in topic.events(session).await {
                let epoch_before = state.epoch;
                if state.apply(&envelope).is_accepted() {
                    // A start or a claim sets the epoch; anything else is written at the current one.
                    let sets_epoch = matches!(
                        envelope.event,
                        SessionEvent::SessionStarted { .. } | SessionEvent::WriterClaimed { .. }
                    );
                    prop_assert!(sets_epoch || envelope.writer_epoch == epoch_before);
                    accepted.insert(envelope.event_id);
                }
            }
            let lost: Vec<_> = confirmed.difference(&accepted).collect();
            prop_assert!(lost.is_empty(), "confirmed but not accepted: {lost:?}");
            Ok(())
        })?;
    }
}
