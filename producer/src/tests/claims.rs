//! Claims: a takeover catches the session up, names the epoch after the latest, and wins only
//! if its claim is the one the partition holds first.

use super::*;
use crate::testing::Operation;
use crate::{Error, SessionWriter};
use sessionlog_schemas::{SessionId, testing};
use sessionlog_session::{Rejection, Verdict};
use std::sync::Arc;

#[tokio::test]
async fn racing_claimants_of_one_epoch_the_first_in_the_log_wins_and_the_other_is_told() {
    let topic = topic();
    let (one, two) = (process(&topic), process(&topic));
    let writer = started(&one).await;
    let session = writer.session_id();
    // Both catch up before either writes: both will ask for epoch 2.
    let first = SessionWriter::prepare_takeover(Arc::clone(&one), session, "first")
        .await
        .expect("caught up");
    let second = SessionWriter::prepare_takeover(Arc::clone(&two), session, "second")
        .await
        .expect("caught up");
    assert_eq!((first.epoch(), second.epoch()), (2, 2));
    let (mut winner, _) = first
        .commit()
        .await
        .expect("the first claim in the log wins");
    let lost = second.commit().await.err();
    assert!(
        matches!(
            lost,
            Some(Error::LostClaim {
                epoch: 2,
                current: 2
            })
        ),
        "{lost:?}"
    );
    let (state, verdicts) = folded(&topic, session).await;
    assert_eq!(state.epoch, 2);
    let claims: Vec<&Verdict> = verdicts.iter().skip(1).map(|(_, v)| v).collect();
    assert!(
        matches!(
            claims[..],
            [
                Verdict::Accepted,
                Verdict::Rejected(Rejection::StaleClaim { .. })
            ]
        ),
        "{claims:?}"
    );
    winner
        .append_with_confirmed(testing::user_request("mine"), None, None)
        .await
        .expect("the winner writes");
}

#[tokio::test]
async fn a_takeover_fences_the_old_writer_and_folds_what_it_wrote_before_the_claim() {
    let topic = topic();
    let (here, there) = (process(&topic), process(&topic));
    let mut old = started(&here).await;
    let session = old.session_id();
    let pending = SessionWriter::prepare_takeover(there, session, "new")
        .await
        .expect("caught up");
    // The old writer's last event lands between the catch-up and the claim.
    let last = old.user_request("just in time").await.expect("accepted");
    let (mut new, claim) = pending.commit().await.expect("claimed");
    assert_eq!(claim.envelope.writer_epoch, 2);
    assert!(claim.position.offset > last.position.offset);
    assert_eq!(
        new.state().last_seq,
        last.envelope.seq,
        "the claim folded it"
    );
    let next = new
        .append_with_confirmed(testing::user_request("after"), None, None)
        .await
        .expect("the new writer continues the session");
    assert_eq!(next.envelope.seq, last.envelope.seq + 1);
    let fenced = old.checkpoint(None).await;
    assert_fenced(&fenced, 1, 2);
}

#[tokio::test]
async fn a_claim_of_a_session_the_log_never_held_is_unknown() {
    let topic = topic();
    let log = process(&topic);
    let session = SessionId::new();
    let claimed = SessionWriter::claim(Arc::clone(&log), session, "nobody").await;
    assert!(
        matches!(claimed, Err(Error::UnknownSession(s)) if s == session),
        "{:?}",
        claimed.err()
    );
    assert!(
        topic.events(session).await.is_empty(),
        "nothing was written"
    );
}

#[tokio::test]
async fn a_claim_of_a_session_whose_start_retention_deleted_says_to_resume_through_recovery() {
    let topic = topic();
    let log = process(&topic);
    let mut writer = started(&log).await;
    let session = writer.session_id();
    let later = writer.user_request("kept").await.expect("appended");
    topic.delete_before(later.position.partition, later.position.offset);
    let claimed = SessionWriter::claim(Arc::clone(&log), session, "late").await;
    assert!(
        matches!(
            claimed,
            Err(Error::StartDeleted { low_watermark, .. }) if low_watermark == later.position.offset
        ),
        "{:?}",
        claimed.err()
    );
}

#[tokio::test]
async fn a_claim_whose_read_back_fails_answers_an_error_not_a_writer() {
    let topic = topic();
    let (here, there) = (process(&topic), process(&topic));
    let writer = started(&here).await;
    let session = writer.session_id();
    // The catch-up reads; the claim is sent; its read-back fails.
    topic.before(Operation::Send, |topic| {
        topic.fail(Operation::Read, crate::testing::Fault::Transient)
    });
    let claimed = SessionWriter::claim(Arc::clone(&there), session, "new").await;
    assert!(claimed.is_err(), "no writer without the read-back");
    // The claim is in the log all the same, and a second attempt sees it and claims after it.
    let (new, claim) = SessionWriter::claim(there, session, "new")
        .await
        .expect("claimed");
    assert_eq!(claim.envelope.writer_epoch, 3);
    assert_eq!(new.epoch(), 3);
    let (state, verdicts) = folded(&topic, session).await;
    assert_eq!(state.epoch, 3);
    let claims = verdicts.iter().filter(|(_, v)| v.is_accepted()).count();
    assert_eq!(claims, 3, "the start and both claims: {verdicts:?}");
}
