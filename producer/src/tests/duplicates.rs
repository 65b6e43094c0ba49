//! Duplicates: a retry of an event whose acknowledgement was lost is answered with the first
//! write's position, and the session holds the event once.

use super::*;
use crate::Error;
use crate::testing::{Fault, Operation};
use proptest::prelude::*;
use sessionlog_schemas::testing;
use sessionlog_session::Verdict;

#[tokio::test]
async fn a_retry_after_a_lost_ack_is_answered_as_a_duplicate_at_the_first_position() {
    let (topic, mut writer) = one_writer().await;
    let session = writer.session_id();
    let envelope = next_envelope(&writer, testing::user_request("once"));
    topic.fail(Operation::Send, Fault::AckLost);
    let lost = writer.append_confirmed(vec![envelope.clone()]).await;
    assert!(
        matches!(lost, Err(Error::NotAcknowledged { .. })),
        "{lost:?}"
    );
    let retried = writer
        .append_confirmed(vec![envelope.clone()])
        .await
        .expect("the retry is confirmed");
    assert!(retried[0].duplicate);
    let (state, verdicts) = folded(&topic, session).await;
    let of_it: Vec<_> = topic
        .events(session)
        .await
        .into_iter()
        .zip(&verdicts)
        .filter(|((_, e), _)| e.event_id == envelope.event_id)
        .map(|((position, _), (_, verdict))| (position, verdict.clone()))
        .collect();
    assert!(
        matches!(of_it[..], [(_, Verdict::Accepted), (_, Verdict::Duplicate)]),
        "written twice, accepted once: {of_it:?}"
    );
    assert_eq!(
        retried[0].appended.position, of_it[0].0,
        "answered with the first write's position"
    );
    assert_eq!(state.last_seq, envelope.seq);
}

#[tokio::test]
async fn a_retry_after_a_send_that_wrote_nothing_is_the_first_write() {
    let (topic, mut writer) = one_writer().await;
    let envelope = next_envelope(&writer, testing::user_request("once"));
    topic.fail(Operation::Send, Fault::Transient);
    let failed = writer.append_confirmed(vec![envelope.clone()]).await;
    assert!(
        matches!(failed, Err(Error::NotAcknowledged { .. })),
        "{failed:?}"
    );
    let retried = writer
        .append_confirmed(vec![envelope])
        .await
        .expect("confirmed");
    assert!(!retried[0].duplicate);
    let (_, verdicts) = folded(&topic, writer.session_id()).await;
    assert!(
        verdicts.iter().all(|(_, v)| *v == Verdict::Accepted),
        "{verdicts:?}"
    );
}

#[tokio::test]
async fn a_retry_of_a_whole_batch_whose_middle_ack_was_lost_completes_it_once() {
    let (topic, mut writer) = one_writer().await;
    let session = writer.session_id();
    let batch = writer.envelopes(
        (0..4)
            .map(|i| testing::user_request(format!("{i}")))
            .collect(),
    );
    // The second event is written but its ack lost; the rest are acknowledged.
    topic.fail_after(Operation::Send, 1, Fault::AckLost);
    let partly = writer.append_confirmed(batch.clone()).await;
    assert!(
        matches!(partly, Err(Error::NotAcknowledged { seq, .. }) if seq == batch[1].seq),
        "{partly:?}"
    );
    let retried = writer
        .append_confirmed(batch.clone())
        .await
        .expect("the retry completes the batch");
    let (state, verdicts) = folded(&topic, session).await;
    assert_eq!(state.last_seq, batch[3].seq);
    let accepted = verdicts.iter().filter(|(_, v)| v.is_accepted()).count();
    assert_eq!(accepted, 1 + batch.len(), "the start and each event once");
    for confirmed in &retried {
        let first = first_written(&topic, &confirmed.appended.envelope).await;
        assert_eq!(Some(confirmed.appended.position), first);
        assert!(
            confirmed.duplicate,
            "every event was written by the first try"
        );
    }
}

/// How one send of [`whatever_acks_are_lost_each_event_is_accepted_once_at_its_first_position`] fares.
fn fault() -> impl Strategy<Value = Option<Fault>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Fault::Transient)),
        1 => Just(Some(Fault::AckLost)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A writer that retries each confirmed append until it is answered, whatever sends fail
    /// or lose their ack, leaves each event accepted once, gap-free, and is answered with the
    /// position where each event was first written.
    #[test]
    fn whatever_acks_are_lost_each_event_is_accepted_once_at_its_first_position(
        faults in proptest::collection::vec(fault(), 1..40),
        events in 1usize..8,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let topic = topic();
            let log = process(&topic);
            let mut writer = started(&log).await;
            let session = writer.session_id();
            let mut faults = faults.into_iter();
            let mut answers = Vec::new();
            for i in 0..events {
                let envelope = writer
                    .envelopes(vec![testing::user_request(format!("{i}"))])
                    .pop()
                    .expect("an envelope");
                loop {
                    if let Some(Some(fault)) = faults.next() {
                        topic.fail(Operation::Send, fault);
                    }
                    match writer.append_confirmed(vec![envelope.clone()]).await {
                        Ok(mut confirmed) => {
                            answers.push(confirmed.pop().expect("one answer"));
                            break;
                        }
                        Err(Error::NotAcknowledged { .. }) => {}
                        Err(e) => prop_assert!(false, "unexpected: {e}"),
                    }
                }
            }
            let (state, verdicts) = folded(&topic, session).await;
            prop_assert_eq!(state.last_seq, 1 + events as u64);
            let written = topic.events(session).await;
            let accepted: Vec<_> = written
                .iter()
                .zip(&verdicts)
                .filter(|(_, (_, v))| v.is_accepted())
                .map(|((position, envelope), _)| (envelope.seq, envelope.event_id, *position))
                .collect();
            let seqs: Vec<u64> = accepted.iter().map(|a| a.0).collect();
            prop_assert_eq!(seqs, (1..=1 + events as u64).collect::<Vec<_>>());
            for answer in answers {
                let envelope = &answer.appended.envelope;
                let first = accepted.iter().find(|a| a.1 == envelope.event_id).map(|a| a.2);
                prop_assert_eq!(Some(answer.appended.position), first);
            }
            Ok(())
        })?;
    }
}
