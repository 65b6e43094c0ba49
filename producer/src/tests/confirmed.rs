//! Confirmed appends: answered only once the log's fold accepted every event, with where each
//! sits; never Ok for an event the fold rejected or the read-back did not find.

use super::*;
use crate::Error;
use crate::testing::{Fault, Operation};
use sessionlog_schemas::{EffectClass, EventEnvelope, testing};
use sessionlog_session::{Rejection, Verdict};

#[tokio::test]
async fn a_confirmed_append_answers_with_the_positions_the_log_holds_its_events_at() {
    let (topic, mut writer) = one_writer().await;
    let session = writer.session_id();
    let batch = writer.envelopes(vec![
        testing::user_request("a"),
        testing::tool_call("search", EffectClass::Idempotent),
    ]);
    let confirmed = writer
        .append_confirmed(batch.clone())
        .await
        .expect("confirmed");
    let answered: Vec<_> = confirmed
        .iter()
        .map(|c| {
            (
                c.appended.position,
                c.appended.envelope.clone(),
                c.duplicate,
            )
        })
        .collect();
    let logged: Vec<_> = topic
        .events(session)
        .await
        .into_iter()
        .skip(1)
        .map(|(position, envelope)| (position, envelope, false))
        .collect();
    assert_eq!(answered, logged);
    let (state, _) = folded(&topic, session).await;
    assert_eq!(state.pending_calls.len(), 1, "the call is the session's");
    assert_eq!(writer.state(), &state, "the writer's fold is the log's");
}

#[tokio::test]
async fn a_confirmed_append_whose_seq_another_writer_took_first_is_rejected_and_the_writer_learns_the_log()
 {
    let (topic, mut writer) = one_writer().await;
    let session = writer.session_id();
    let mine = next_envelope(&writer, testing::user_request("mine"));
    // Another writer of the same epoch (a raw producer) takes the seq just before the send.
    let theirs = EventEnvelope::new(
        session,
        mine.seq,
        mine.writer_epoch,
        testing::user_request("theirs"),
    );
    let taken = theirs.clone();
    topic.before(Operation::Send, move |topic| {
        topic.append_envelope(&taken).expect("written");
    });
    let rejected = writer.append_confirmed(vec![mine.clone()]).await;
    assert!(
        matches!(
            &rejected,
            Err(Error::Rejected { seq, rejection: Rejection::SeqConflict { .. }, .. }) if *seq == mine.seq
        ),
        "{rejected:?}"
    );
    let (state, verdicts) = folded(&topic, session).await;
    assert!(
        matches!(
            verdicts.last(),
            Some((_, Verdict::Rejected(Rejection::SeqConflict { .. })))
        ),
        "{verdicts:?}"
    );
    assert_eq!(writer.state(), &state, "the writer's state is the log's");
    assert_eq!(writer.next_seq(), theirs.seq + 1);
    writer
        .append_with_confirmed(testing::user_request("next"), None, None)
        .await
        .expect("the writer goes on after the other's event");
}

#[tokio::test]
async fn a_confirmed_append_whose_read_back_fails_is_not_answered_and_its_retry_is() {
    let (topic, mut writer) = one_writer().await;
    let envelope = next_envelope(&writer, testing::user_request("once"));
    topic.fail(Operation::Read, Fault::Transient);
    let unread = writer.append_confirmed(vec![envelope.clone()]).await;
    assert!(
        unread.is_err(),
        "acknowledged but not confirmed: {unread:?}"
    );
    let retried = writer
        .append_confirmed(vec![envelope.clone()])
        .await
        .expect("confirmed");
    let first = first_written(&topic, &envelope).await;
    assert_eq!(Some(retried[0].appended.position), first);
    assert!(retried[0].duplicate, "the first send was written");
}

#[tokio::test]
async fn an_event_the_writers_fold_refuses_is_not_sent() {
    let (topic, mut writer) = one_writer().await;
    let records = topic.records(writer.partition()).len();
    let result = testing::tool_result(99, sessionlog_schemas::CallOutcome::Succeeded, "out");
    let refused = writer.append(result).await;
    assert!(matches!(refused, Err(Error::Refused(_))), "{refused:?}");
    assert_eq!(topic.records(writer.partition()).len(), records);
}
