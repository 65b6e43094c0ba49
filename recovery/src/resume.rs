//! Resuming a session: claim the next epoch, settle in-doubt tool calls by the rules, and hand
//! the new harness what it needs to continue.

use crate::context::{ResumeContext, within_budget};
use crate::resolver::ToolOutcome;
use crate::{Error, Recovery, Result, StartPoint};
use serde::Serialize;
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_schemas::{EffectClass, ResultSource, SessionEvent, SessionId};
use sessionlog_session::context::ContextWindow;
use sessionlog_session::{PendingCall, SessionState};
use std::sync::Arc;

/// What a resumed harness may do with a tool call that was requested but has no result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum InDoubtAction {
    /// A pure call: run it again.
    RunAgain,
    /// An idempotent call its service never received: issue it again with the same key.
    ReissueWithSameKey,
}

/// A tool call the new harness must settle before going on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InDoubtCall {
    /// The call as the log has it.
    pub call: PendingCall,
    /// What the harness may do.
    pub action: InDoubtAction,
}

/// A session rebuilt for resuming, before the claim: what [`Recovery::prepare_resume`] read.
pub struct ResumePoint {
    /// The session as the log had it.
    pub rebuilt: crate::RebuiltSession,
    /// Its context window, as far as the rebuild read.
    pub window: ContextWindow,
    /// Held from the rebuild until the claim is answered: bounds the resumes in flight.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Everything a new harness needs to continue a session.
#[derive(Serialize)]
pub struct ResumeBundle {
    /// The session's state, including the claim and any outcomes recovery recorded.
    pub state: SessionState,
    /// The new writer's epoch.
    pub epoch: u64,
    /// The new writer's token: a harness that goes on through the ingest service presents it
    /// with every append (`Sessionlog-Writer-Token`), so nobody else can write at this epoch.
    pub writer_token: Option<String>,
    /// The seq of the next event to append.
    pub next_seq: u64,
    /// Calls to settle first (pure, or idempotent and never received).
    pub in_doubt: Vec<InDoubtCall>,
    /// The working set for the next model call, within the caller's token budget.
    pub context: ResumeContext,
    /// Outcomes recovery learned from resolvers and recorded in the log.
    pub resolved: Vec<Appended>,
    /// The MCP server over the session's history, for the harness to give its model, with a
    /// reader token for the session (`[recovery.mcp]`; absent when not configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::mcp_access::McpAccess>,
    /// The writer for a Rust harness to go on appending with (absent in serialised form).
    #[serde(skip)]
    pub writer: Option<SessionWriter>,
}

impl std::fmt::Debug for ResumeBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeBundle")
            .field("session", &self.state.session_id)
            .field("epoch", &self.epoch)
            .field("next_seq", &self.next_seq)
            .field("in_doubt", &self.in_doubt)
            .field("resolved", &self.resolved.len())
            .finish()
    }
}

impl Recovery {
    /// Resumes `session` as `writer`: refuses an ended session, one awaiting an approval and one
    /// awaiting an operator; otherwise claims the next epoch and settles every in-doubt call:
    /// a recorded result is never re-executed, a pure call may run again, an idempotent one is
    /// resolved through its tool's resolver, and anything else stops the session with
    /// `ResolutionRequired` until an operator records the outcome.
    pub async fn resume(
        &self,
        session: SessionId,
        writer: &str,
        context_budget_tokens: Option<usize>,
    ) -> Result<ResumeBundle> {
        let point = self.prepare_resume(session).await?;
        self.resume_at(point, writer, context_budget_tokens).await
    }

    /// The first half of [`Self::resume`]: the session rebuilt from the log, with its context
    /// window. Nothing is appended.
    pub async fn prepare_resume(&self, session: SessionId) -> Result<ResumePoint> {
        let waited = std::time::Instant::now();
        let permit = self.resume_permit().await?;
        crate::observe::phase_done("wait_turn", waited);
        let started = std::time::Instant::now();
        // The projector's context window as far as it goes; the rest of the log is folded in
        // below, from the same read that rebuilds the state.
        let stored = self
            .store()
            .load_context(session)
            .await?
            .unwrap_or_default();
        let mut window = stored.clone();
        let rebuilt = self
            .rebuild_with(session, None, |e, _| {
                if e.accepted && e.offset > stored.applied_offset {
                    window.fold(&e.envelope, &self.settings().context);
                    window.applied_offset = e.offset;
                }
            })
            .await?;
        // The read above covers every event after its start point; a stored window that ends
        // before a checkpoint start misses the events in between: start from the window the
        // projector stored with that checkpoint instead (from the first event only if it
        // stored none).
        if let StartPoint::Checkpoint { offset, .. } = rebuilt.start
            && stored.applied_offset < offset
        {
            let last = rebuilt.last_offset.unwrap_or(offset).max(offset);
            window = self
                .window_at(session, rebuilt.state.last_seq, last)
                .await?
                .window;
        }
        crate::observe::phase_done("rebuild", started);
        Ok(ResumePoint {
            rebuilt,
            window,
            _permit: permit,
        })
    }

    /// Resumes `session` for a worker woken for it at epoch `woken_at` (a wake record's
    /// [`sessionlog_log::Wake::epoch`]): [`Self::resume`], except that a session someone claimed
    /// since (its epoch is past `woken_at`), or whose claim another worker won meanwhile, is
    /// [`Error::AlreadyTaken`], with nothing appended by this worker. The wake is a hint; the
    /// claim through the fold decides.
    pub async fn take(
        &self,
        session: SessionId,
        writer: &str,
        woken_at: u64,
        context_budget_tokens: Option<usize>,
    ) -> Result<ResumeBundle> {
        let point = self.prepare_resume(session).await?;
        // Boxed: the claim's future is large, and callers that run several at once in one task
        // (a harness racing its approver) would hold them all on one stack.
        Box::pin(self.claim_from(point, writer, context_budget_tokens, Some(woken_at))).await
    }

    /// The second half of [`Self::resume`]: claims from `point` and settles in-doubt calls.
    /// The old harness may append between the rebuild and the claim; the claim folds those
    /// events, and the gates are judged again on the state after it.
    pub async fn resume_at(
        &self,
        point: ResumePoint,
        writer: &str,
        context_budget_tokens: Option<usize>,
    ) -> Result<ResumeBundle> {
        // Boxed, as in `take`.
        Box::pin(self.claim_from(point, writer, context_budget_tokens, None)).await
    }

    #[tracing::instrument(skip(self, point), fields(
        session = %point.rebuilt.state.session_id,
        partition = point.rebuilt.partition,
        offset = point.rebuilt.end_offset,
    ))]
    async fn claim_from(
        &self,
        point: ResumePoint,
        writer: &str,
        context_budget_tokens: Option<usize>,
        woken_at: Option<u64>,
    ) -> Result<ResumeBundle> {
        let writer_name = writer;
        let ResumePoint {
            rebuilt,
            mut window,
            _permit,
        } = point;
        let session = rebuilt.state.session_id;
        let started = std::time::Instant::now();
        // A worker woken because a pause ran out lifts it (signed, as an unpause is); anyone
        // else finds a paused session refused.
        let resumable = |state: &SessionState| {
            if woken_at.is_some() && pause_lapsed(state) {
                check_resumable(&SessionState {
                    paused: false,
                    ..state.clone()
                })
            } else {
                check_resumable(state)
            }
        };
        // Refuse early when the rebuilt state already forbids it: no claim is appended then.
        not_taken(&rebuilt.state, woken_at)?;
        resumable(&rebuilt.state)?;
        self.notary().check(&rebuilt.state)?;
        let pending_claim = SessionWriter::prepare_claim(
            Arc::clone(self.log()),
            rebuilt.state,
            rebuilt.partition,
            rebuilt.end_offset,
            writer,
        )
        .await?;
        // The catch-up folded whatever was appended since the rebuild: judge that state.
        not_taken(pending_claim.state(), woken_at)?;
        resumable(pending_claim.state())?;
        self.notary().check(pending_claim.state())?;
        if let Some(woken_at) = woken_at {
            self.not_held(pending_claim.state(), woken_at).await?;
        }
        let (mut writer, _claim, late) = match pending_claim.commit_caught_up().await {
            // A rival worker's claim reached the partition first.
            Err(sessionlog_producer::Error::LostClaim { epoch, current }) if woken_at.is_some() => {
                return Err(Error::AlreadyTaken {
                    session: session.to_string(),
                    woken_at: woken_at.unwrap_or(epoch),
                    current,
                });
            }
            other => other?,
        };
        // A worker's claim is leased at once: if the worker dies before it holds the lease
        // itself (during the settling below, or before its first renewal), the lease lapses
        // and the session is woken again, instead of sitting claimed by no one.
        if woken_at.is_some()
            && let Err(e) = writer.put_lease_once(writer_name).await
        {
            tracing::warn!(%session, error = %e, "leasing a taken session failed; its worker must");
        }
        // And the claim folded whatever landed before it (an approval request, an end the old
        // harness wrote in the meantime): the gates hold on the state after the claim.
        resumable(writer.state())?;
        if woken_at.is_some() && pause_lapsed(writer.state()) {
            self.append_attested(&mut writer, SessionEvent::SessionResumed {}, None, None)
                .await?;
        }
        self.notary().check(writer.state())?;
        // Those events belong in the context window too.
        for event in &late {
            window.apply(event);
        }
        crate::observe::phase_done("claim", started);
        let started = std::time::Instant::now();

        let pending: Vec<PendingCall> = writer.state().pending_calls.values().cloned().collect();
        let mut in_doubt = Vec::new();
        let mut resolved = Vec::new();
        let mut stuck = Vec::new();
        for call in pending {
            match self.settle(&call).await {
                Settlement::InDoubt(action) => in_doubt.push(InDoubtCall { call, action }),
                // What recovery records is confirmed before it answers: a resolver's result
                // (signed, like every privileged fact) and a stop for an operator.
                Settlement::Record(event) => {
                    resolved.push(
                        self.append_attested(
                            &mut writer,
                            event,
                            Some(call.event_id),
                            call.idempotency_key.clone(),
                        )
                        .await?,
                    );
                }
                Settlement::NeedsOperator(reason) => {
                    writer
                        .append_with_confirmed(
                            SessionEvent::ResolutionRequired {
                                call_seq: call.seq,
                                reason: reason.into(),
                            },
                            Some(call.event_id),
                            None,
                        )
                        .await?;
                    stuck.push(call.seq);
                }
            }
        }
        if !stuck.is_empty() {
            return Err(Error::NeedsResolution {
                session: session.to_string(),
                calls: stuck,
            });
        }
        // The new harness gets the session's texts opened (it is the session's writer now).
        let opener = self.opener_for(session, writer.state(), false).await?;
        let mut context = within_budget(&window, writer.state(), context_budget_tokens, &opener);
        if let Some(fork_point) = &writer.state().parent {
            // The child's own view first; what it leaves of the budget goes to the parent's.
            let left = context
                .budget_tokens
                .saturating_sub(context.estimated_tokens);
            let inherited = self.inherited_context(fork_point, left, 0).await;
            context.inherited = Some(Box::new(inherited));
        }
        // The outcomes recovery recorded, as the harness will read them: opened.
        for appended in &mut resolved {
            appended.envelope = opener.open_event(&appended.envelope).0;
        }
        crate::observe::phase_done("bundle", started);
        metrics::counter!(crate::observe::RESUMES).increment(1);
        Ok(ResumeBundle {
            context,
            epoch: writer.state().epoch,
            writer_token: writer.token().map(|t| t.as_str().to_string()),
            next_seq: writer.next_seq(),
            state: crate::reveal::opened_state(&opener, writer.state()),
            in_doubt,
            resolved,
            mcp: self.mcp_access(session, writer_name, &writer.state().tenant),
            writer: Some(writer),
        })
    }

    /// For a worker, at the moment of its claim: refuses a session whose lease is live at its
    /// current epoch. Its harness is alive (a wake read late, after the harness renewed, or one
    /// whose cause no longer stands), and the claim would fence it; the wake component wakes the
    /// session again if that lease lapses.
    async fn not_held(&self, state: &SessionState, woken_at: u64) -> Result<()> {
        match self.lease(state.session_id).await? {
            Some(lease)
                if lease.is_live(sessionlog_schemas::now_micros())
                    && lease.epoch >= state.epoch =>
            {
                Err(Error::AlreadyTaken {
                    session: state.session_id.to_string(),
                    woken_at,
                    current: state.epoch,
                })
            }
            _ => Ok(()),
        }
    }

    /// Decides what to do with one call that has no recorded result.
    async fn settle(&self, call: &PendingCall) -> Settlement {
        match call.effect {
            EffectClass::Pure => Settlement::InDoubt(InDoubtAction::RunAgain),
            EffectClass::NonIdempotent => Settlement::NeedsOperator(format!(
                "{} is not idempotent and its outcome is not in the log; repeating it could repeat its effect",
                call.tool
            )),
            EffectClass::Idempotent => {
                let Some(resolver) = self.resolvers().get(&call.tool) else {
                    return Settlement::NeedsOperator(format!(
                        "no resolver is configured for tool {}",
                        call.tool
                    ));
                };
                match resolver.lookup(call).await {
                    ToolOutcome::Executed { outcome, output } => {
                        Settlement::Record(SessionEvent::ToolCallResult {
                            call_seq: call.seq,
                            outcome,
                            output,
                            source: ResultSource::Resolver,
                            recorded_by: Some(format!("resolver:{}", call.tool)),
                            note: None,
                        })
                    }
                    ToolOutcome::NotExecuted => {
                        Settlement::InDoubt(InDoubtAction::ReissueWithSameKey)
                    }
                    ToolOutcome::Unknown(why) => Settlement::NeedsOperator(format!(
                        "the resolver of {} could not tell: {why}",
                        call.tool
                    )),
                }
            }
        }
    }
}

enum Settlement {
    InDoubt(InDoubtAction),
    Record(SessionEvent),
    NeedsOperator(String),
}

/// Whether `state` is paused with an `until` that has passed.
fn pause_lapsed(state: &SessionState) -> bool {
    state.paused
        && state
            .paused_until
            .is_some_and(|until| until <= sessionlog_schemas::now_micros())
}

/// For a worker woken at `woken_at`: refuses a session claimed since.
fn not_taken(state: &SessionState, woken_at: Option<u64>) -> Result<()> {
    match woken_at {
        Some(woken_at) if state.epoch > woken_at => Err(Error::AlreadyTaken {
            session: state.session_id.to_string(),
            woken_at,
            current: state.epoch,
        }),
        _ => Ok(()),
    }
}

/// Refuses to resume a session that ended, is paused, awaits a decision, or awaits an
/// operator.
fn check_resumable(state: &SessionState) -> Result<()> {
    let session = state.session_id.to_string();
    if let Some(outcome) = state.terminal {
        return Err(Error::Ended {
            session,
            outcome: format!("{outcome:?}").to_lowercase(),
        });
    }
    if state.erased {
        return Err(Error::Ended {
            session,
            outcome: "erased".into(),
        });
    }
    if state.paused {
        return Err(Error::Paused { session });
    }
    if let Some(approval) = state.pending_approvals.values().next() {
        return Err(Error::AwaitingApproval {
            session,
            approval_id: approval.approval_id.clone(),
        });
    }
    let stuck: Vec<u64> = state
        .pending_calls
        .values()
        .filter(|c| c.resolution_required.is_some())
        .map(|c| c.seq)
        .collect();
    if !stuck.is_empty() {
        return Err(Error::NeedsResolution {
            session,
            calls: stuck,
        });
    }
    Ok(())
}
