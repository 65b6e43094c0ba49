//! The `sessions` and `context_view` rows, rewritten in every batch that touches their
//! session: what this instance last wrote of them, and which columns a rewrite can leave
//! unset because they have not changed.

use super::{to_i64, to_json};
use crate::read::ProjectedSession;
use scylla::value::MaybeUnset;
use sessionlog_schemas::Content;
use sessionlog_session::SessionState;
use sessionlog_session::context::ContextWindow;
use uuid::Uuid;

/// The `sessions` row, column by column, then the write timestamp. Some columns are unset when
/// they have not changed since this instance last wrote the row (see [`LastWritten`]).
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct SessionRow {
    session_id: Uuid,
    status: MaybeUnset<&'static str>,
    agent: MaybeUnset<Option<String>>,
    title: MaybeUnset<Option<String>>,
    epoch: MaybeUnset<i64>,
    writer: MaybeUnset<Option<String>>,
    last_seq: MaybeUnset<i64>,
    parent_session_id: MaybeUnset<Option<Uuid>>,
    parent_seq: MaybeUnset<Option<i64>>,
    started_at_us: MaybeUnset<i64>,
    updated_at_us: MaybeUnset<i64>,
    tokens_in: MaybeUnset<i64>,
    tokens_out: MaybeUnset<i64>,
    cost_micros: MaybeUnset<i64>,
    pending_calls: MaybeUnset<i32>,
    pending_approvals: MaybeUnset<i32>,
    log_partition: MaybeUnset<i32>,
    applied_offset: MaybeUnset<i64>,
    state_digest: MaybeUnset<Option<String>>,
    state_json: MaybeUnset<String>,
    last_model_seq: MaybeUnset<Option<i64>>,
    write_timestamp: i64,
}

impl From<&ProjectedSession> for SessionRow {
    fn from(projected: &ProjectedSession) -> Self {
        use MaybeUnset::Set;
        let s = &projected.state;
        Self {
            session_id: s.session_id.0,
            status: Set(s.status().as_str()),
            agent: Set(s.agent.clone()),
            // Only plain titles (sessions written without encryption) have a column; a sealed
            // one stays in the stored state, for a reader with the key.
            title: Set(s
                .title
                .as_ref()
                .and_then(Content::as_plain)
                .map(String::from)),
            epoch: Set(to_i64(s.epoch)),
            writer: Set(s.writer.clone()),
            last_seq: Set(to_i64(s.last_seq)),
            parent_session_id: Set(s.parent.as_ref().map(|p| p.parent_session_id.0)),
            parent_seq: Set(s.parent.as_ref().map(|p| to_i64(p.parent_seq))),
            started_at_us: Set(s.started_at),
            updated_at_us: Set(s.updated_at),
            tokens_in: Set(to_i64(s.tokens_in)),
            tokens_out: Set(to_i64(s.tokens_out)),
            cost_micros: Set(to_i64(s.cost_micros)),
            pending_calls: Set(s.pending_calls.len() as i32),
            pending_approvals: Set(s.pending_approvals.len() as i32),
            log_partition: Set(projected.partition),
            applied_offset: Set(projected.applied_offset),
            // No reader needs the digest (a checkpoint's is computed when it is verified): the
            // column is cleared of one an earlier release wrote, then left unset.
            state_digest: Set(None),
            state_json: Set(crate::stored::state_json(s)),
            last_model_seq: Set(projected.last_model_call.map(to_i64)),
            write_timestamp: projected.applied_offset,
        }
    }
}

/// The `context_view` row, column by column, then the write timestamp; unset like
/// [`SessionRow`].
#[derive(Clone, scylla::SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct ContextRow {
    session_id: Uuid,
    applied_offset: MaybeUnset<i64>,
    last_seq: MaybeUnset<i64>,
    /// No longer written: a reader of the view takes the plan from the session's state. Cleared
    /// (like the two below) of what an earlier release wrote, which would otherwise outlive an
    /// erasure and, without the TTL the rest of an ended session's row gets, the row.
    plan: MaybeUnset<Option<String>>,
    /// Superseded by `context_turns` (migration 3); cleared in case an older projector wrote it.
    recent_turns: MaybeUnset<Option<String>>,
    first_turn_seq: MaybeUnset<Option<i64>>,
    /// No longer written: the view's unresolved calls are the state's. Cleared like `plan`.
    unresolved_calls: MaybeUnset<Option<String>>,
    older_ranges: MaybeUnset<String>,
    left_out: MaybeUnset<String>,
    summaries: MaybeUnset<String>,
    policy: MaybeUnset<String>,
    write_timestamp: i64,
    /// Not a column: whether the view's summaries have so far only gained newer ones (no
    /// retraction withdrew one), which is what lets an unchanged `summaries` go unset.
    #[scylla(skip)]
    summaries_one_way: bool,
}

/// Unsets each listed column of `row` whose value equals the one in `written`.
macro_rules! unset_unchanged {
    ($row:ident, $written:ident: $($column:ident),+ $(,)?) => {
        $(
            if let (MaybeUnset::Set(now), MaybeUnset::Set(then)) = (&$row.$column, &$written.$column)
                && now == then
            {
                $row.$column = MaybeUnset::Unset;
            }
        )+
    };
}

/// A row rewritten in every batch that touches its session.
pub(crate) trait Rewritten: Clone {
    /// This row with its one-way columns that equal `written`'s unset.
    fn unset_unchanged(self, written: &Self) -> Self;
}

// Only one-way columns are ever left unset: set once (agent, parent, start), or only growing
// (epoch, totals, older ranges, left-out counts). A write from an instance that has just lost
// the partition can still land between two of the new owner's writes, with a higher timestamp
// than the first; a one-way column equal in both has that value in between too, so the stale
// cell is right. A column that can return to an earlier value (status, writer, pending counts,
// plan, unresolved calls) could keep the stale cell, so it is always sent.
impl Rewritten for SessionRow {
    fn unset_unchanged(mut self, written: &Self) -> Self {
        unset_unchanged!(self, written: agent, title, epoch, parent_session_id, parent_seq,
            started_at_us, tokens_in, tokens_out, cost_micros, log_partition, last_model_seq,
            state_digest);
        self
    }
}

impl ContextRow {
    /// The row of `window` for `state`'s session, every column set.
    pub(super) fn of(window: &ContextWindow, state: &SessionState) -> Self {
        use MaybeUnset::Set;
        ContextRow {
            session_id: state.session_id.0,
            applied_offset: Set(window.applied_offset),
            last_seq: Set(to_i64(state.last_seq)),
            plan: Set(None),
            recent_turns: Set(None),
            first_turn_seq: Set(window.recent.front().map(|t| to_i64(t.seq))),
            unresolved_calls: Set(None),
            older_ranges: Set(crate::stored::older_json(&window.older)),
            left_out: Set(crate::stored::left_out_json(&window.left_out)),
            summaries: Set(to_json(&window.summaries)),
            policy: Set(to_json(&window.policy)),
            write_timestamp: window.applied_offset,
            summaries_one_way: window.left_out.retracted_summaries == 0,
        }
    }
}

impl Rewritten for ContextRow {
    fn unset_unchanged(mut self, written: &Self) -> Self {
        // Not `older_ranges` or `first_turn_seq`: a summary can take a range or every recent
        // turn out again, back to an earlier value. Summaries only ever gain a newer one (or
        // lose their texts, once) until a retraction withdraws one, which can take them back
        // to an earlier value: from then on they are always sent. The policy is set when the
        // session starts.
        unset_unchanged!(self, written: plan, recent_turns, unresolved_calls, left_out, policy);
        if self.summaries_one_way {
            unset_unchanged!(self, written: summaries);
        }
        self
    }
}

/// What this instance last wrote in a session's `sessions` and `context_view` rows.
///
/// Both rows are rewritten in every batch that touches the session, but many of their columns
/// (agent, parent, totals, older ranges) rarely change, and the store's work per batch grows
/// with the cells written. So such a column equal to the one last written is sent unset and
/// the store keeps its cell. This relies on this instance's writes of the session landing in
/// order, so it lives and is forgotten with the projector's session cache; the first write
/// after a load sends every column.
#[derive(Default)]
pub struct LastWritten {
    pub(super) session: Option<SessionRow>,
    pub(super) context: Option<ContextRow>,
}

/// `row` with the columns it need not send unset (none without `written`); `row` becomes the
/// last written.
pub(crate) fn changes<R: Rewritten>(row: R, written: &mut Option<R>) -> R {
    let sent = match written.as_ref() {
        Some(written) => row.clone().unset_unchanged(written),
        None => row.clone(),
    };
    *written = Some(row);
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::SessionId;

    fn is_set<T>(column: &MaybeUnset<T>) -> bool {
        matches!(column, MaybeUnset::Set(_))
    }

    /// A summary can empty the window, so the first turn can go back to an earlier value: a
    /// stale write from an instance that lost the partition could then outlive an unset cell
    /// (review of the context-offloading change). A retraction can take the summaries back to
    /// an earlier value too ([A] → [A, B] → [A]): once one withdrew a summary, they are sent
    /// every time.
    #[test]
    fn a_context_row_always_sends_what_a_summary_can_take_back() {
        let state = SessionState::empty(SessionId(Uuid::now_v7()));
        let mut window = ContextWindow::default();
        let mut written = None;
        let first = changes(ContextRow::of(&window, &state), &mut written);
        assert!(
            matches!(first.plan, MaybeUnset::Set(None))
                && matches!(first.unresolved_calls, MaybeUnset::Set(None)),
            "an instance's first write clears what an earlier release wrote"
        );
        window.applied_offset = 7;
        let again = changes(ContextRow::of(&window, &state), &mut written);
        assert!(is_set(&again.first_turn_seq), "first_turn_seq left unset");
        assert!(is_set(&again.older_ranges), "older_ranges left unset");
        assert!(!is_set(&again.policy), "the policy is set once");
        assert!(
            !is_set(&again.plan) && !is_set(&again.unresolved_calls),
            "the cleared columns are cleared once"
        );
        assert!(!is_set(&again.summaries), "unchanged summaries sent");
        window.left_out.retracted_summaries = 1;
        let _ = changes(ContextRow::of(&window, &state), &mut written);
        let again = changes(ContextRow::of(&window, &state), &mut written);
        assert!(
            is_set(&again.summaries),
            "summaries left unset after a retraction"
        );
    }

    #[test]
    fn a_rewritten_row_sends_only_the_columns_that_changed() {
        let mut projected = ProjectedSession {
            state: SessionState::empty(SessionId(Uuid::now_v7())),
            partition: 3,
            applied_offset: 10,
            last_model_call: None,
        };
        let mut written = None;
        let first = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&first.title) && is_set(&first.log_partition) && is_set(&first.state_json));

        projected.applied_offset = 11;
        let second = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&second.applied_offset));
        assert!(!is_set(&second.title) && !is_set(&second.log_partition));
        assert!(!is_set(&second.tokens_in) && !is_set(&second.epoch));
        assert_eq!(second.write_timestamp, 11);

        projected.state.title = Some("renamed".into());
        let third = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&third.title) && is_set(&third.state_json));
        assert!(!is_set(&third.agent) && !is_set(&third.cost_micros));

        // A column that returns to null is sent as null, not left holding the old value.
        projected.state.title = None;
        let fourth = changes(SessionRow::from(&projected), &mut written);
        assert!(matches!(fourth.title, MaybeUnset::Set(None)));
    }

    #[test]
    fn columns_that_can_return_to_an_earlier_value_are_always_sent() {
        let projected = ProjectedSession {
            state: SessionState::empty(SessionId(Uuid::now_v7())),
            partition: 0,
            applied_offset: 5,
            last_model_call: None,
        };
        let mut written = None;
        changes(SessionRow::from(&projected), &mut written);
        let again = changes(SessionRow::from(&projected), &mut written);
        assert!(is_set(&again.status) && is_set(&again.state_json));
        // The digest is not written: cleared once, then left as it is.
        assert!(!is_set(&again.state_digest));
        assert!(is_set(&again.writer));
        assert!(is_set(&again.pending_calls) && is_set(&again.pending_approvals));
        assert!(!is_set(&again.started_at_us));
    }
}
