//! Writer fencing on the real stack: racing claims, zombie writes rejected by the fold, the
//! fenced writer's typed error, and forks.

use anyhow::{Context, Result, bail};
use sessionlog_producer::{Appended, Error, EventLog, SessionWriter};
use sessionlog_schemas::{Content, ForkPoint, SessionEvent, SessionId};
use sessionlog_session::{Rejection, Verdict};
use sessionlog_testkit::TestStack;
use sessionlog_testkit::producer::fold_topic;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn request(text: &str) -> SessionEvent {
    SessionEvent::UserRequest {
        content: Content::plain(text),
    }
}

/// A separate `EventLog` stands for a separate harness process: it shares nothing in memory.
async fn process(stack: &TestStack) -> Result<Arc<EventLog>> {
    Ok(Arc::new(EventLog::from_settings(&stack.settings).await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn two_claimants_race_one_wins_and_the_fold_rejects_every_later_write_of_the_losers()
-> Result<()> {
    let stack = TestStack::new("pclaim", 2).await?;
    let (original_log, log_b, log_c) = (
        process(&stack).await?,
        process(&stack).await?,
        process(&stack).await?,
    );
    let (mut original, _) = SessionWriter::create(original_log, "original", None).await?;
    original
        .append_batch(vec![request("one"), request("two")])
        .await?;
    let session = original.session_id();

    // The original writer keeps appending while the two claimants race, and for a few events
    // after the race is decided: it is another process, so nothing tells it yet.
    let decided = Arc::new(AtomicBool::new(false));
    let zombie = tokio::spawn({
        let decided = Arc::clone(&decided);
        async move {
            let mut acked: Vec<Appended> = Vec::new();
            let mut after = 0;
            while after < 5 && acked.len() < 10_000 {
                let was_decided = decided.load(Ordering::SeqCst);
                acked.push(original.user_request("still here").await?);
                if was_decided {
                    after += 1;
                }
            }
            Ok::<_, Error>((original, acked))
        }
    });
    // A true race: both claimants catch up with the log first, so both ask for epoch 2, and
    // only then write their claims at the same time. (Racing `claim` calls end up serialised
    // when one catch-up happens to finish after the other's claim landed.)
    let partition = log_b.partition_of(session);
    let empty = || sessionlog_session::SessionState::empty(session);
    let (pending_b, pending_c) = tokio::try_join!(
        SessionWriter::prepare_claim(log_b, empty(), partition, 0, "writer-b"),
        SessionWriter::prepare_claim(log_c, empty(), partition, 0, "writer-c"),
    )?;
    assert_eq!((pending_b.epoch(), pending_c.epoch()), (2, 2));
    let (b, c) = tokio::join!(pending_b.commit(), pending_c.commit());
    decided.store(true, Ordering::SeqCst);
    let ((mut winner, claim), winner_name, lost) = match (b, c) {
        (Ok(won), Err(lost)) => (won, "writer-b", lost),
        (Err(lost), Ok(won)) => (won, "writer-c", lost),
        (b, c) => bail!(
            "exactly one claim must win: b {:?}, c {:?}",
            b.map(|w| w.1),
            c.map(|w| w.1)
        ),
    };
    assert!(
        matches!(
            lost,
            Error::LostClaim {
                epoch: 2,
                current: 2
            }
        ),
        "{lost:?}"
    );
    assert_eq!(claim.envelope.writer_epoch, 2);
    let mut winner_events = vec![claim.clone()];
    winner_events.extend(
        winner
            .append_batch(vec![request("winner one"), request("winner two")])
            .await?,
    );

    let (mut original, zombie_acked) = zombie.await??;
    let late = zombie_acked
        .iter()
        .filter(|a| a.position.offset > claim.position.offset)
        .count();
    assert!(
        late >= 5,
        "the original wrote {late} events after the claim"
    );
    // It learns at its next checkpoint (a read-back), then at once at every append.
    match original.checkpoint(None).await {
        Err(Error::Fenced {
            epoch: 1,
            current: 2,
        }) => {}
        other => bail!("expected Fenced at the checkpoint, got {other:?}"),
    }
    match original.user_request("after the checkpoint").await {
        Err(Error::Fenced {
            epoch: 1,
            current: 2,
        }) => {}
        other => bail!("expected Fenced at the next append, got {other:?}"),
    }

    let histories = fold_topic(&*process(&stack).await?).await?;
    let history = histories.get(&session).context("session in the topic")?;
    let mut zombies = 0;
    for (event, verdict) in &history.verdicts {
        let after_claim = event.position.offset > claim.position.offset;
        match &event.envelope.event {
            SessionEvent::WriterClaimed { .. } if event.position == claim.position => {
                assert_eq!(*verdict, Verdict::Accepted);
            }
            SessionEvent::WriterClaimed { .. } => assert_eq!(
                *verdict,
                Verdict::Rejected(Rejection::StaleClaim {
                    epoch: 2,
                    current: 2
                }),
                "the losing claim"
            ),
            _ if event.envelope.writer_epoch == 1 && after_claim => {
                zombies += 1;
                assert_eq!(
                    *verdict,
                    Verdict::Rejected(Rejection::Zombie {
                        epoch: 1,
                        current: 2
                    }),
                    "the original's event at offset {}",
                    event.position.offset
                );
            }
            _ => assert_eq!(*verdict, Verdict::Accepted, "{:?}", event.envelope),
        }
    }
    // The late events plus the checkpoint that found out.
    assert_eq!(zombies, late + 1);
    assert_eq!(history.state.epoch, 2);
    assert_eq!(history.state.writer.as_deref(), Some(winner_name));
    assert_eq!(
        history.state.canonical_json(),
        winner.state().canonical_json(),
        "the winner's fold is the log's"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_taken_over_in_the_same_process_is_fenced_before_sending() -> Result<()> {
    let stack = TestStack::new("pfence", 1).await?;
    let log = process(&stack).await?;
    let (mut original, _) = SessionWriter::create(Arc::clone(&log), "original", None).await?;
    let session = original.session_id();
    let (mut successor, _) = SessionWriter::claim(Arc::clone(&log), session, "successor").await?;
    match original.user_request("too late").await {
        Err(Error::Fenced {
            epoch: 1,
            current: 2,
        }) => {}
        other => bail!("expected Fenced, got {other:?}"),
    }
    successor.user_request("mine now").await?;
    let histories = fold_topic(&log).await?;
    let history = &histories[&session];
    assert_eq!(
        history.verdicts.len(),
        3,
        "start, claim, the successor's event"
    );
    assert!(history.verdicts.iter().all(|(_, v)| v.is_accepted()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn claiming_a_session_that_never_started_is_a_typed_error() -> Result<()> {
    let stack = TestStack::new("punknown", 1).await?;
    let log = process(&stack).await?;
    let nobody = SessionId::new();
    match SessionWriter::claim(log, nobody, "someone").await {
        Err(Error::UnknownSession(s)) => assert_eq!(s, nobody),
        other => bail!("expected UnknownSession, got {:?}", other.map(|w| w.1)),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_starts_a_new_session_that_names_its_parent() -> Result<()> {
    let stack = TestStack::new("pfork", 2).await?;
    let log = process(&stack).await?;
    let (mut parent, _) = SessionWriter::create(Arc::clone(&log), "parent", None).await?;
    let at = parent.checkpoint(None).await?;
    let fork_point = ForkPoint {
        parent_session_id: parent.session_id(),
        parent_seq: at.envelope.seq,
        parent_partition: at.position.partition,
        parent_offset: at.position.offset,
    };
    let (mut child, first) = SessionWriter::fork(
        Arc::clone(&log),
        fork_point.clone(),
        "child",
        "default",
        None,
    )
    .await?;
    assert_eq!((first.envelope.seq, first.envelope.writer_epoch), (1, 1));
    assert_ne!(child.session_id(), parent.session_id());
    child.user_request("a different path").await?;
    let histories = fold_topic(&log).await?;
    let forked = &histories[&child.session_id()];
    assert_eq!(forked.state.parent.as_ref(), Some(&fork_point));
    assert_eq!(forked.state.last_seq, 2);
    assert_eq!(histories[&parent.session_id()].state.last_seq, 2);
    Ok(())
}
