//! A session's context window at a point of its history, and what a fork inherits from its
//! parent: the parent's view at the fork point.
//!
//! The projector stores the window with every checkpoint it verifies, so a view at any point
//! costs the events between the latest verified checkpoint at or before it and the point, not
//! the session's whole history.

use crate::context::{ResumeContext, within_budget};
use crate::{Recovery, Result, StartPoint};
use serde::Serialize;
use sessionlog_schemas::{ForkPoint, Seq, SessionId};
use sessionlog_session::SessionState;
use sessionlog_session::context::ContextWindow;

/// Ancestors whose views a fork's context carries, nearest first; beyond it a fork's context
/// names the next ancestor without its view (its history still reads by range).
pub const INHERITED_DEPTH: usize = 4;

/// A parent's view at the point a session was forked from it, as the child's harness gets it.
#[derive(Clone, Debug, Serialize)]
pub struct InheritedContext {
    /// The parent.
    pub parent: SessionId,
    /// The parent's seq the child was forked at: the view stands just after it.
    pub through_seq: Seq,
    /// The parent's view there, cut to the budget the child's own view left. Its references
    /// are into the parent's range (`GET /v1/sessions/{parent}/events`). It has no unresolved
    /// calls: they were the parent's to settle, not the child's. `None` past
    /// [`INHERITED_DEPTH`], with no budget left, or when it could not be built.
    pub context: Option<Box<ResumeContext>>,
    /// Why `context` is absent when it was not built for lack of depth or budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// A session's window at a point, with its state there.
pub struct WindowAt {
    /// The window just after the point.
    pub window: ContextWindow,
    /// The session's state just after the point.
    pub state: SessionState,
    /// Log records read to build it (what the rebuild read; see [`crate::RebuiltSession`]).
    pub records_read: u64,
}

impl Recovery {
    /// `session`'s context window and state just after its event at `seq` (at `offset` in its
    /// partition): the window stored with the latest verified checkpoint at or before `seq`,
    /// and the accepted events after it up to `offset` folded in; with no such checkpoint (or
    /// one stored before windows were), from the session's first event.
    pub async fn window_at(&self, session: SessionId, seq: Seq, offset: i64) -> Result<WindowAt> {
        let from_start = || {
            self.fold_window(
                session,
                0,
                ContextWindow::default(),
                SessionState::empty(session),
                offset,
            )
        };
        let checkpoint = self
            .store()
            .latest_verified_checkpoint(session, Some(seq))
            .await?
            .and_then(|c| Some((c.seq, c.context?, c.state)));
        let Some((checkpoint_seq, window, state)) = checkpoint else {
            return Ok(from_start().await?.0);
        };
        let (at, start) = self
            .fold_window(session, checkpoint_seq, window, state, offset)
            .await?;
        // The rebuild starts at the latest verified checkpoint up to `checkpoint_seq`; one
        // verified since the read above would skip events this window needs.
        match start {
            StartPoint::Checkpoint { seq, .. } if seq == checkpoint_seq => Ok(at),
            _ => Ok(from_start().await?.0),
        }
    }

    /// Folds into `window` (with `state`, the session's state where the window stands) the
    /// accepted events after it up to `offset`, read from the latest verified checkpoint at or
    /// before `at_most_seq` (0: from the first event); also says where that read started.
    async fn fold_window(
        &self,
        session: SessionId,
        at_most_seq: Seq,
        mut window: ContextWindow,
        mut state: SessionState,
        offset: i64,
    ) -> Result<(WindowAt, StartPoint)> {
        let start_offset = window.applied_offset;
        let policies = &self.settings().context;
        let rebuilt = self
            .rebuild_through(session, Some(at_most_seq), Some(offset), |e, s| {
                if e.offset > start_offset && e.offset <= offset {
                    if e.accepted {
                        window.fold(&e.envelope, policies);
                    }
                    window.applied_offset = e.offset;
                }
                if e.offset == offset {
                    state = s.clone();
                }
            })
            .await?;
        let at = WindowAt {
            window,
            state,
            records_read: rebuilt.records_read,
        };
        Ok((at, rebuilt.start))
    }

    /// `session`'s context view as a resume would hand it over, within `budget_tokens` (`None`:
    /// its policy's), with a fork's inherited part, and nothing appended: what a reader (the
    /// MCP server) shows a model. Texts of an erased session read as erased.
    pub async fn context_view(
        &self,
        session: SessionId,
        budget_tokens: Option<usize>,
    ) -> Result<ResumeContext> {
        let point = self.prepare_resume(session).await?;
        let state = &point.rebuilt.state;
        let erased = self.erased_for_reading(session, state.erased).await?;
        let opener = self.opener_for(session, state, erased).await?;
        let mut context = within_budget(&point.window, state, budget_tokens, &opener);
        if let Some(fork_point) = &state.parent {
            let left = context
                .budget_tokens
                .saturating_sub(context.estimated_tokens);
            context.inherited = Some(Box::new(self.inherited_context(fork_point, left, 0).await));
        }
        Ok(context)
    }

    /// What a session forked at `fork_point` inherits: the parent's view there (and, within
    /// [`INHERITED_DEPTH`], the parent's own inheritance), cut to `budget_tokens`. Best effort:
    /// a parent that cannot be read (its records gone with retention, a store outage) leaves
    /// `context` absent with the reason, since a resume has already claimed the child when
    /// this runs.
    pub async fn inherited_context(
        &self,
        fork_point: &ForkPoint,
        budget_tokens: usize,
        depth: usize,
    ) -> InheritedContext {
        let mut inherited = InheritedContext {
            parent: fork_point.parent_session_id,
            through_seq: fork_point.parent_seq,
            context: None,
            unavailable: None,
        };
        if depth >= INHERITED_DEPTH {
            inherited.unavailable = Some(format!("beyond {INHERITED_DEPTH} ancestors"));
        } else if budget_tokens == 0 {
            inherited.unavailable = Some("no token budget left".into());
        } else {
            match self.parent_view(fork_point, budget_tokens, depth).await {
                Ok(context) => inherited.context = Some(Box::new(context)),
                Err(e) => {
                    tracing::warn!(parent = %fork_point.parent_session_id, error = %e,
                        "a fork's inherited context could not be built");
                    inherited.unavailable = Some(e.to_string());
                }
            }
        }
        inherited
    }

    /// The parent's view at `fork_point`, within `budget_tokens`, with its own inheritance.
    async fn parent_view(
        &self,
        fork_point: &ForkPoint,
        budget_tokens: usize,
        depth: usize,
    ) -> Result<ResumeContext> {
        let parent = fork_point.parent_session_id;
        let at = self
            .window_at(parent, fork_point.parent_seq, fork_point.parent_offset)
            .await?;
        // An erasure or a redaction after the fork point reaches what the child inherits too,
        // wherever it ran.
        let projected = self
            .store()
            .load_session(parent)
            .await?
            .map(|row| row.state)
            .unwrap_or_else(|| at.state.clone());
        let erased = self.erased_for_reading(parent, projected.erased).await?;
        let opener = self.opener_for(parent, &projected, erased).await?;
        let mut context = within_budget(&at.window, &at.state, Some(budget_tokens), &opener);
        context.unresolved_calls.clear();
        if let Some(grandparent) = &at.state.parent {
            let left = budget_tokens.saturating_sub(context.estimated_tokens);
            let further = Box::pin(self.inherited_context(grandparent, left, depth + 1)).await;
            context.inherited = Some(Box::new(further));
        }
        Ok(context)
    }
}
