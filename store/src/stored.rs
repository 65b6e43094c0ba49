//! How the projector stores a session's state and its view's counts: JSON without what a
//! reader can put back.
//!
//! The `sessions` row is rewritten in almost every batch that touches its session, and its
//! `state_json` was most of what the projector wrote per event (828 of 1,336 bytes in the
//! projector bench). Much of it said nothing new: fields still as a new session has them (no
//! plan, no pending calls, zero totals) and fields the same write's own columns hold (writer,
//! last seq, update time). The stored state leaves both out and reading puts them back. Only
//! columns sent in every write count: those cells belong to the same single-partition write as
//! the stored state, so a replica that has one has the others, at any consistency level (a
//! column left unset when unchanged could come from an earlier write a lagging replica has not
//! seen). A state stored whole (by an earlier release) reads as it did. The view's `left_out`
//! counts and older ranges are stored compactly too.
//!
//! This is the storage form only: digests and checkpoints use the canonical JSON
//! ([`SessionState::canonical_json`]), which is unchanged.

use serde_json::{Map, Value};
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;
use sessionlog_session::context::{LeftOut, OlderRange};
use std::sync::OnceLock;

/// A `sessions` row as a reader gets it: the stored state, where it stands, and the columns
/// sent with it in every write that hold a state field.
#[derive(Clone, Debug, Default, PartialEq, Eq, scylla::DeserializeRow)]
#[scylla(flavor = "enforce_order")]
pub(crate) struct StoredSession {
    pub state_json: Option<String>,
    pub log_partition: Option<i32>,
    pub applied_offset: Option<i64>,
    pub last_model_seq: Option<i64>,
    pub writer: Option<String>,
    pub last_seq: Option<i64>,
    pub updated_at_us: Option<i64>,
}

/// The columns of [`StoredSession`], in its order, for a `SELECT`.
pub(crate) const STORED_SESSION_COLUMNS: &str =
    "state_json, log_partition, applied_offset, last_model_seq, writer, last_seq, updated_at_us";

impl StoredSession {
    /// Each column-held field with its column's value as JSON (`None`: a null column).
    fn fields(&self) -> [(&'static str, Option<Value>); 3] {
        [
            ("writer", self.writer.clone().map(Value::from)),
            ("last_seq", self.last_seq.map(Value::from)),
            ("updated_at", self.updated_at_us.map(Value::from)),
        ]
    }
}

/// The fields [`StoredSession`]'s columns hold exactly for `state`: a seq above `i64::MAX`
/// does not fit its `bigint` column (the row writes it capped), so it stays in the stored JSON.
fn held_by_columns(state: &SessionState) -> Vec<&'static str> {
    let mut held = vec!["writer", "updated_at"];
    if i64::try_from(state.last_seq).is_ok() {
        held.push("last_seq");
    }
    held
}

/// `state` as the `sessions` row stores it: the fields that differ from a new session's,
/// without those its columns hold.
pub(crate) fn state_json(state: &SessionState) -> String {
    let held = held_by_columns(state);
    let mut fields = differing(to_value(state), new_session());
    // The row's key.
    fields.remove("session_id");
    fields.retain(|field, _| !held.contains(&field.as_str()));
    Value::Object(fields).to_string()
}

/// The state a `sessions` row stores: its JSON, with the fields it leaves out taken from the
/// row's columns and, failing those, from a new session's state.
pub(crate) fn read_state(
    session: SessionId,
    columns: &StoredSession,
) -> serde_json::Result<SessionState> {
    let json = columns.state_json.as_deref().unwrap_or("");
    let Value::Object(mut stored) = serde_json::from_str::<Value>(json)? else {
        // Not an object: let serde say what is wrong with it.
        return serde_json::from_str(json);
    };
    for (field, value) in columns.fields() {
        if let Some(value) = value
            && !stored.contains_key(field)
        {
            stored.insert(field.into(), value);
        }
    }
    stored.insert("session_id".into(), to_value(&session));
    serde_json::from_value(overlaid(stored, new_session().clone()))
}

/// A new session's state as JSON, without its id: what stored states leave out. Made once,
/// not for every row written or read.
fn new_session() -> &'static Value {
    static NEW_SESSION: OnceLock<Value> = OnceLock::new();
    NEW_SESSION.get_or_init(|| {
        let mut value = to_value(&SessionState::empty(SessionId(uuid::Uuid::nil())));
        if let Some(fields) = value.as_object_mut() {
            fields.remove("session_id");
        }
        value
    })
}

/// `LeftOut::default()` as JSON, made once.
fn no_counts() -> &'static Value {
    static NO_COUNTS: OnceLock<Value> = OnceLock::new();
    NO_COUNTS.get_or_init(|| to_value(&LeftOut::default()))
}

/// `left_out` as the `context_view` row stores it: the counts that are not zero.
pub(crate) fn left_out_json(left_out: &LeftOut) -> String {
    Value::Object(differing(to_value(left_out), no_counts())).to_string()
}

/// The `left_out` a `context_view` row stores, its missing counts zero.
pub(crate) fn read_left_out(json: &str) -> serde_json::Result<LeftOut> {
    match serde_json::from_str::<Value>(json)? {
        Value::Object(stored) => serde_json::from_value(overlaid(stored, no_counts().clone())),
        _ => serde_json::from_str(json),
    }
}

/// `older` as the `context_view` row stores it: each range as `[first_seq, last_seq, turns]`,
/// with a fourth element, its summary's seq, when it stands for one. The column is sent in every
/// batch and holds up to [`OLDER_RANGES`](sessionlog_session::context::OLDER_RANGES) ranges; as
/// objects, their field names were most of it.
pub(crate) fn older_json(older: &[OlderRange]) -> String {
    let ranges = older.iter().map(|range| {
        let mut parts = vec![
            Value::from(range.first_seq),
            Value::from(range.last_seq),
            to_value(&range.turns),
        ];
        if let Some(summary) = range.summary_seq {
            parts.push(Value::from(summary));
        }
        Value::Array(parts)
    });
    Value::Array(ranges.collect()).to_string()
}

/// The older ranges a `context_view` row stores, as [`older_json`] writes them or as objects
/// (earlier releases).
pub(crate) fn read_older(json: &str) -> serde_json::Result<Vec<OlderRange>> {
    let Value::Array(ranges) = serde_json::from_str::<Value>(json)? else {
        return serde_json::from_str(json);
    };
    ranges
        .into_iter()
        .map(|range| match range {
            Value::Array(parts) => {
                let part = |i: usize| parts.get(i).cloned().unwrap_or(Value::Null);
                Ok(OlderRange {
                    first_seq: serde_json::from_value(part(0))?,
                    last_seq: serde_json::from_value(part(1))?,
                    turns: serde_json::from_value(part(2))?,
                    summary_seq: serde_json::from_value(part(3))?,
                })
            }
            whole => serde_json::from_value(whole),
        })
        .collect()
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serialising plain data to a `Value` cannot fail.
    serde_json::to_value(value).unwrap_or_default()
}

/// `value`'s top-level fields that differ from `baseline`'s.
fn differing(value: Value, baseline: &Value) -> Map<String, Value> {
    let Value::Object(mut fields) = value else {
        return Map::new();
    };
    if let Value::Object(baseline) = baseline {
        fields.retain(|field, v| baseline.get(field) != Some(v));
    }
    fields
}

/// `stored`'s fields over `baseline`'s: what [`differing`] left out, put back.
fn overlaid(stored: Map<String, Value>, baseline: Value) -> Value {
    let mut whole = match baseline {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    whole.extend(stored);
    Value::Object(whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_schemas::Content;
    use sessionlog_session::context::ContextWindow;

    /// A started session with a plan, a writer and totals: most fields set.
    fn busy_state() -> SessionState {
        let mut state = SessionState::empty(SessionId::new());
        state.started = true;
        state.agent = Some("agent".into());
        state.title = Some(Content::plain("a task"));
        state.plan = Some(Content::plain("1. look"));
        state.epoch = 2;
        state.writer = Some("harness-7".into());
        state.last_seq = 41;
        state.started_at = 1_764_000_000_000_000;
        state.updated_at = 1_764_000_000_500_000;
        state.tokens_in = 1_200;
        state.cost_micros = 34;
        state.history = "ab".repeat(32);
        state
    }

    /// The row the projector writes for `state`.
    fn row_of(state: &SessionState) -> StoredSession {
        StoredSession {
            state_json: Some(state_json(state)),
            writer: state.writer.clone(),
            last_seq: Some(crate::rows::to_i64(state.last_seq)),
            updated_at_us: Some(state.updated_at),
            ..StoredSession::default()
        }
    }

    /// A row holding only `json`.
    fn only(json: &str) -> StoredSession {
        StoredSession {
            state_json: Some(json.into()),
            ..StoredSession::default()
        }
    }

    #[test]
    fn a_stored_state_reads_back_as_the_state_written() {
        for state in [SessionState::empty(SessionId::new()), busy_state()] {
            let read = read_state(state.session_id, &row_of(&state)).unwrap();
            assert_eq!(read, state, "{:?}", row_of(&state).state_json);
            assert_eq!(read.canonical_json(), state.canonical_json());
        }
    }

    #[test]
    fn a_stored_state_leaves_out_defaults_and_what_the_columns_hold() {
        let state = busy_state();
        let json = state_json(&state);
        let stored: Value = serde_json::from_str(&json).unwrap();
        for field in [
            "session_id",
            "writer",
            "last_seq",
            "updated_at",
            "pending_approvals",
            "paused",
        ] {
            assert!(stored.get(field).is_none(), "{field} in {json}");
        }
        assert!(
            stored.get("plan").is_some()
                && stored.get("history").is_some()
                && stored.get("agent").is_some(),
            "{json}"
        );
        assert!(
            json.len() * 2 < state.canonical_json().len(),
            "{} bytes stored of {}",
            json.len(),
            state.canonical_json().len()
        );
    }

    #[test]
    fn a_seq_too_big_for_its_column_stays_in_the_stored_state() {
        let mut state = busy_state();
        state.last_seq = u64::MAX;
        // The column holds i64::MAX, not the seq.
        let read = read_state(state.session_id, &row_of(&state)).unwrap();
        assert_eq!(read.last_seq, u64::MAX);
    }

    /// What a stored state leaves out is read back from a new session's state: were that to
    /// change, every row stored before would read differently. A change here needs a new
    /// storage form, not a new baseline.
    #[test]
    fn a_new_sessions_state_is_what_stored_states_were_compacted_against() {
        let id = SessionId::new();
        let mut empty = to_value(&SessionState::empty(id));
        empty.as_object_mut().unwrap().remove("session_id");
        assert_eq!(
            empty.to_string(),
            r#"{"agent":null,"cost_micros":0,"epoch":0,"erased":false,"history":"","last_checkpoint":null,"last_seq":0,"model_calls":0,"parent":null,"paused":false,"pending_approvals":{},"pending_calls":{},"plan":null,"started":false,"started_at":0,"terminal":null,"title":null,"tokens_in":0,"tokens_out":0,"tool_calls":0,"updated_at":0,"writer":null}"#
        );
    }

    #[test]
    fn a_state_stored_whole_by_an_earlier_release_reads_as_it_did() {
        let state = busy_state();
        let read = read_state(state.session_id, &only(&state.canonical_json())).unwrap();
        assert_eq!(read, state);
    }

    #[test]
    fn a_stored_state_that_is_not_a_state_is_an_error() {
        let id = SessionId::new();
        assert!(read_state(id, &only("{not a state")).is_err());
        assert!(read_state(id, &only("[1, 2]")).is_err());
        assert!(read_state(id, &only(r#"{"epoch": "one"}"#)).is_err());
    }

    #[test]
    fn stored_older_ranges_read_back_and_old_ones_still_read() {
        let older = vec![
            OlderRange {
                first_seq: 1,
                last_seq: 40,
                turns: [("user".to_string(), 20), ("assistant".to_string(), 20)].into(),
                summary_seq: None,
            },
            OlderRange {
                first_seq: 41,
                last_seq: 60,
                turns: [("user".to_string(), 3)].into(),
                summary_seq: Some(61),
            },
        ];
        let json = older_json(&older);
        assert_eq!(
            json,
            r#"[[1,40,{"assistant":20,"user":20}],[41,60,{"user":3},61]]"#
        );
        assert_eq!(read_older(&json).unwrap(), older);
        let whole = serde_json::to_string(&older).unwrap();
        assert!(json.len() * 2 < whole.len(), "{json} against {whole}");
        assert_eq!(read_older(&whole).unwrap(), older);
        assert_eq!(read_older("[]").unwrap(), vec![]);
        assert!(read_older("[[1]]").is_err(), "a range without its last seq");
        assert!(read_older(r#"{"first_seq": 1}"#).is_err());
    }

    #[test]
    fn stored_left_out_counts_read_back_and_old_ones_still_read() {
        let mut window = ContextWindow::default();
        window.left_out.evicted_turns = 7;
        window.left_out.by_kind.insert("WriterClaimed".into(), 1);
        let json = left_out_json(&window.left_out);
        assert_eq!(json, r#"{"by_kind":{"WriterClaimed":1},"evicted_turns":7}"#);
        assert_eq!(read_left_out(&json).unwrap(), window.left_out);
        let whole = serde_json::to_string(&window.left_out).unwrap();
        assert_eq!(read_left_out(&whole).unwrap(), window.left_out);
        assert_eq!(read_left_out("{}").unwrap(), LeftOut::default());
    }
}
