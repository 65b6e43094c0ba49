//! Forks: a new session whose first event names its parent and the fork point. The parent's
//! prefix is referenced, not copied; each branch has its own epoch, sequence and side effects.

use crate::{Error, LoggedEvent, Recovery, Result};
use serde::Serialize;
use sessionlog_producer::{Appended, SessionWriter};
use sessionlog_schemas::{EffectClass, ForkPoint, InheritedApproval, SessionEvent, SessionId};
use sessionlog_session::SessionState;
use std::sync::Arc;

/// Where to fork a parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkAt {
    /// At a checkpoint event (its seq); refused if the event there is not a checkpoint.
    Checkpoint(u64),
    /// After any accepted event (its seq).
    Seq(u64),
}

/// A session's ancestors (nearest first) and descendants.
#[derive(Clone, Debug, Serialize)]
pub struct Lineage {
    /// The session asked about.
    pub session_id: SessionId,
    /// Its parent, grandparent, … with the fork point of each step.
    pub ancestors: Vec<ForkPoint>,
    /// Sessions forked from it (directly), with their fork seq, as the projection knows them
    /// (`session_children`), by child id.
    pub children: Vec<(SessionId, u64)>,
    /// True when the answer covers the session alone ([`Scope::Session`]): its parent appears
    /// as an id and fork point, nothing further up or down is read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub withheld: bool,
}

/// Which sessions an answer about a lineage may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The session and its relatives: a credential of the tenant.
    Family,
    /// The session alone: a credential narrowed to it sees its relatives only as ids, and
    /// reads them with a credential of their own.
    Session,
}

/// The events after a fork point on each side.
#[derive(Clone, Debug, Serialize)]
pub struct BranchDiff {
    /// Where the child branched.
    pub fork_point: ForkPoint,
    /// Accepted parent events after the fork point.
    pub parent_only: Vec<LoggedEvent>,
    /// Accepted child events after its fork event.
    pub child_only: Vec<LoggedEvent>,
    /// True when the parent's events were not read ([`Scope::Session`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub withheld: bool,
}

impl Recovery {
    /// Forks `parent` at `at` into a new session run by `agent`. Refused
    /// ([`Error::ForkOfWaitingSession`]) where the parent waits at that point for an approval
    /// or an operator, or has a non-idempotent call in doubt: a child starts `Running` with no
    /// pending calls or approvals, so it would walk past the gate (see docs/design.md, Forks).
    pub async fn fork(&self, parent: SessionId, at: ForkAt, agent: &str) -> Result<Appended> {
        self.fork_by(parent, at, agent, None, None, &[]).await
    }

    /// [`Self::fork`] for a verified caller, whom the child's first event names (`forked_by`),
    /// into the child id `child` when given (else a fresh UUIDv7). A `child` that is already a
    /// session is refused (the producer's `Rejection::AlreadyStarted`, 409 `already_started`
    /// over HTTP) and nothing is written.
    ///
    /// The child inherits neither pending nor granted approvals, except the granted ones
    /// `inherit_approvals` names: each must be granted in the parent at the fork point, by a
    /// decision this service signed, and not yet acted on there. They are recorded in the
    /// child's first event, which is signed; the child may then act on each once.
    pub async fn fork_by(
        &self,
        parent: SessionId,
        at: ForkAt,
        agent: &str,
        by: Option<&str>,
        child: Option<SessionId>,
        inherit_approvals: &[String],
    ) -> Result<Appended> {
        let seq = match at {
            ForkAt::Checkpoint(seq) | ForkAt::Seq(seq) => seq,
        };
        let bad = |reason: String| Error::BadForkPoint {
            session: parent.to_string(),
            seq,
            reason,
        };
        let mut found: Option<(LoggedEvent, SessionState)> = None;
        // Start at a checkpoint before the fork point, so the event at it is among those read.
        let rebuilt = self
            .rebuild_with(parent, Some(seq.saturating_sub(1)), |e, state| {
                if e.accepted
                    && e.envelope.seq == seq
                    && !matches!(e.envelope.event, SessionEvent::WriterClaimed { .. })
                {
                    found = Some((e.clone(), state.clone()));
                }
            })
            .await?;
        if seq == 0 || seq > rebuilt.state.last_seq {
            return Err(bad(format!(
                "the parent's events run from seq 1 to {}",
                rebuilt.state.last_seq
            )));
        }
        let (event, at_fork) = found.ok_or_else(|| bad("no accepted event at that seq".into()))?;
        refuse_waiting_fork(&at_fork, seq)?;
        if matches!(at, ForkAt::Checkpoint(_))
            && !matches!(event.envelope.event, SessionEvent::Checkpoint { .. })
        {
            return Err(bad(format!(
                "the event there is a {}, not a checkpoint",
                event.envelope.event.kind()
            )));
        }
        let inherited = self.approvals_to_carry_over(&at_fork, seq, inherit_approvals)?;
        let fork_point = ForkPoint {
            parent_session_id: parent,
            parent_seq: seq,
            parent_partition: rebuilt.partition,
            parent_offset: event.offset,
        };
        // The child belongs to the parent's tenant: a fork never moves a session's data across.
        let (_, first) = SessionWriter::fork_into(
            Arc::clone(self.log()),
            child,
            fork_point,
            agent,
            &at_fork.tenant,
            by,
            inherited,
        )
        .await?;
        Ok(first)
    }

    /// The granted approvals of `parent` (as it stood at the fork point) that a fork names to
    /// carry over, or why one cannot be.
    fn approvals_to_carry_over(
        &self,
        parent: &SessionState,
        seq: u64,
        ids: &[String],
    ) -> Result<Vec<InheritedApproval>> {
        ids.iter()
            .map(|id| {
                let refuse = |why: &str| Error::BadForkPoint {
                    session: parent.session_id.to_string(),
                    seq,
                    reason: format!("approval {id:?} cannot be carried over: {why}"),
                };
                let decision = parent
                    .decided_approvals
                    .get(id)
                    .ok_or_else(|| refuse("it is not decided at the fork point"))?;
                if !decision.approved {
                    return Err(refuse("it was denied"));
                }
                if let Some(by) = decision.acted_on_by {
                    return Err(refuse(&format!("the call at seq {by} already acted on it")));
                }
                if !self
                    .notary()
                    .verifies(&decision.statement, decision.attestation.as_ref())
                {
                    return Err(refuse(
                        "its decision does not carry this service's signature",
                    ));
                }
                Ok(InheritedApproval {
                    approval_id: id.clone(),
                    action_digest: decision.action_digest.clone(),
                    decided_by: decision.decided_by.clone(),
                    parent_decision_seq: decision.inherited_from.unwrap_or(decision.seq),
                })
            })
            .collect()
    }

    /// The ancestors of `session` (from the log) and its children (from the projection).
    pub async fn lineage(&self, session: SessionId) -> Result<Lineage> {
        self.lineage_in(session, Scope::Family).await
    }

    /// [`Self::lineage`] as `scope` may see it: with [`Scope::Session`], only the session's
    /// own fork point (its parent as an id), no ancestor above it and no child.
    pub async fn lineage_in(&self, session: SessionId, scope: Scope) -> Result<Lineage> {
        let mut ancestors = Vec::new();
        let mut current = session;
        // Each step rebuilds one ancestor (from its latest checkpoint) to learn its parent.
        while let Some(point) = self.rebuild(current).await?.state.parent {
            current = point.parent_session_id;
            ancestors.push(point);
            if scope == Scope::Session {
                break;
            }
            if ancestors.len() > 1000 {
                break; // a cycle cannot be written (a fork is always a new session); guard anyway
            }
        }
        let children = match scope {
            Scope::Family => self.children(session).await?,
            Scope::Session => Vec::new(),
        };
        Ok(Lineage {
            session_id: session,
            ancestors,
            children,
            withheld: scope == Scope::Session,
        })
    }

    /// The events after the fork point on each side of a child and its parent.
    pub async fn diff(&self, child: SessionId) -> Result<BranchDiff> {
        self.diff_in(child, Scope::Family).await
    }

    /// [`Self::diff`] as `scope` may see it: with [`Scope::Session`], the child's side only;
    /// the parent's events (opened with the parent's key) need a credential on the parent.
    pub async fn diff_in(&self, child: SessionId, scope: Scope) -> Result<BranchDiff> {
        let mut child_only = Vec::new();
        let rebuilt = self
            .rebuild_with(child, Some(0), |e, _| {
                if e.accepted && e.envelope.seq > 1 {
                    child_only.push(e.clone());
                }
            })
            .await?;
        let fork_point = rebuilt
            .state
            .parent
            .clone()
            .ok_or_else(|| Error::BadForkPoint {
                session: child.to_string(),
                seq: 0,
                reason: "the session is not a fork".into(),
            })?;
        // Each side opens with its own session's key (an erased side reads as erased).
        let child_opener = self
            .opener_for(child, &rebuilt.state, rebuilt.state.erased)
            .await?;
        crate::reveal::open_events(&child_opener, &mut child_only);
        if scope == Scope::Session {
            return Ok(BranchDiff {
                fork_point,
                parent_only: Vec::new(),
                child_only,
                withheld: true,
            });
        }
        let mut parent_only = Vec::new();
        // A checkpoint at or before the fork point still reads every parent event after it.
        let parent = self
            .rebuild_with(
                fork_point.parent_session_id,
                Some(fork_point.parent_seq),
                |e, _| {
                    if e.accepted && e.envelope.seq > fork_point.parent_seq {
                        parent_only.push(e.clone());
                    }
                },
            )
            .await?;
        let parent_opener = self
            .opener_for(
                fork_point.parent_session_id,
                &parent.state,
                parent.state.erased,
            )
            .await?;
        crate::reveal::open_events(&parent_opener, &mut parent_only);
        Ok(BranchDiff {
            fork_point,
            parent_only,
            child_only,
            withheld: false,
        })
    }

    async fn children(&self, session: SessionId) -> Result<Vec<(SessionId, u64)>> {
        // The projector lists each fork under its parent when it projects the child's
        // `SessionForked`: one partition read.
        Ok(self.store().children(session).await?)
    }
}

/// Refuses a fork point where the parent waits for a person: the child would not inherit the
/// wait. Fork before the request, or settle it first (decide the approval, resolve the call).
fn refuse_waiting_fork(state: &SessionState, seq: u64) -> Result<()> {
    let approvals: Vec<String> = state.pending_approvals.keys().cloned().collect();
    let calls: Vec<u64> = state
        .pending_calls
        .values()
        .filter(|c| c.resolution_required.is_some() || c.effect == EffectClass::NonIdempotent)
        .map(|c| c.seq)
        .collect();
    if approvals.is_empty() && calls.is_empty() {
        return Ok(());
    }
    Err(Error::ForkOfWaitingSession {
        session: state.session_id.to_string(),
        seq,
        approvals,
        calls,
    })
}
