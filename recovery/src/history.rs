//! Reading any range of a session's history: the event index says where each event of the
//! range sits in the log, exactly those records are read and decoded, and their texts are
//! opened with the key of the session each belongs to. What a read costs follows the range
//! asked for (and its page), not the session's length or its partition's.
//!
//! The index is the projector's: an event it has not applied yet is not in it, and a session
//! it has not seen at all reads as unknown. The records themselves come from the log, which
//! stays the authority: a record that is not the event the index names is an error, not an
//! answer.

use crate::{Error, Recovery, Result};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sessionlog_keys::{DataKeyStore, Opener, Text};
use sessionlog_schemas::{EventEnvelope, SessionEvent, SessionId};
use sessionlog_session::SessionState;
use sessionlog_store::IndexRow;
use std::collections::{BTreeMap, BTreeSet};
use utoipa::ToSchema;
use uuid::Uuid;

/// The events a page holds when the caller does not say.
pub const DEFAULT_LIMIT: u64 = 100;

/// The most events one page may hold.
pub const MAX_LIMIT: u64 = 1000;

/// The most ancestors an inherited read follows (a fork is always a new session, so a cycle
/// cannot be written; this only bounds a corrupt projection).
const MAX_ANCESTORS: usize = 1000;

/// Every kind of event, as [`SessionEvent::kind`] names it: what a kinds filter may ask for.
pub const KINDS: [&str; 21] = SessionEvent::KINDS;

/// Which part of a session's history to read, as a caller asks for it: nothing is trusted
/// until [`EventRange::validate`] (which [`Recovery::events`] runs) accepts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventRange {
    /// The first seq of the session's own events to return; default 1, and never 0 (seqs
    /// start at 1).
    pub from_seq: Option<u64>,
    /// The last seq of the session's own events to return; default: the last there is.
    pub to_seq: Option<u64>,
    /// Only events of these kinds ([`KINDS`]); empty: every kind.
    pub kinds: Vec<String>,
    /// The most events of one page: 1 to [`MAX_LIMIT`], default [`DEFAULT_LIMIT`].
    pub limit: Option<u64>,
    /// Where the previous page stopped: its `next_cursor`, as given.
    pub cursor: Option<String>,
    /// Give the inherited history of a fork first: each ancestor's events from seq 1 through
    /// the point the next session forked at, oldest ancestor first, then the session's own.
    /// `from_seq` and `to_seq` still apply to the session's own seqs only; the inherited
    /// events are always each ancestor's whole prefix (filtered by `kinds`).
    pub inherited: bool,
}

/// An [`EventRange`] that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CheckedRange {
    from: u64,
    to: u64,
    kinds: Vec<String>,
    limit: usize,
    cursor: Option<Cursor>,
    inherited: bool,
}

/// At most the first 40 characters of what a client sent, to quote back in a problem.
pub(crate) fn clip(text: &str) -> &str {
    text.char_indices()
        .nth(40)
        .map_or(text, |(end, _)| &text[..end])
}

pub(crate) fn bad(code: &'static str, reason: impl Into<String>) -> Error {
    Error::BadRange {
        code,
        reason: reason.into(),
    }
}

impl EventRange {
    /// Checks every part of the request (before anything is read): bounds, limit, kinds and
    /// cursor. Each failure is an [`Error::BadRange`] whose message says what is accepted.
    pub fn validate(&self) -> Result<()> {
        self.check().map(|_| ())
    }

    fn check(&self) -> Result<CheckedRange> {
        let from = self.from_seq.unwrap_or(1);
        if from == 0 {
            return Err(bad(
                "bad_range",
                "from_seq must be at least 1 (a session's first event is seq 1)",
            ));
        }
        let to = self.to_seq.unwrap_or(u64::MAX);
        if to < from {
            return Err(bad(
                "bad_range",
                format!("to_seq ({to}) is before from_seq ({from})"),
            ));
        }
        let limit = match self.limit.unwrap_or(DEFAULT_LIMIT) {
            limit @ 1..=MAX_LIMIT => limit,
            other => {
                return Err(bad(
                    "bad_limit",
                    format!(
                        "limit must be from 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}), not {other}"
                    ),
                ));
            }
        };
        let mut kinds = BTreeSet::new();
        for kind in &self.kinds {
            if !KINDS.contains(&kind.as_str()) {
                return Err(bad(
                    "unknown_kind",
                    format!(
                        "unknown event kind {kind:?}; the kinds are {}",
                        KINDS.join(", ")
                    ),
                ));
            }
            kinds.insert(kind.clone());
        }
        let cursor = self.cursor.as_deref().map(Cursor::decode).transpose()?;
        Ok(CheckedRange {
            from,
            to,
            kinds: kinds.into_iter().collect(),
            // At most MAX_LIMIT: fits any usize.
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            cursor,
            inherited: self.inherited,
        })
    }
}

/// Where a page stopped: the session the next event belongs to (with an inherited read, an
/// ancestor until its prefix is done) and that event's seq. Clients pass it back as it came
/// (it is opaque to them); [`Cursor::decode`] refuses anything this build did not make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The session of the next event.
    pub session: SessionId,
    /// The next event's seq (at least 1).
    pub next_seq: u64,
}

/// The cursor format's version, its first byte: a later format can tell old cursors apart.
const CURSOR_VERSION: u8 = 1;
/// Version, session id, seq.
const CURSOR_BYTES: usize = 1 + 16 + 8;

impl Cursor {
    /// The cursor as the text a page carries: URL-safe base64 (no padding) of the version,
    /// the session id and the seq.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(CURSOR_BYTES);
        bytes.push(CURSOR_VERSION);
        bytes.extend_from_slice(self.session.0.as_bytes());
        bytes.extend_from_slice(&self.next_seq.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads a cursor [`Cursor::encode`] made; anything else is an [`Error::BadRange`]
    /// (`bad_cursor`).
    pub fn decode(text: &str) -> Result<Self> {
        let malformed = || {
            bad(
                "bad_cursor",
                "the cursor is not one this service gave out: pass a page's next_cursor as it came",
            )
        };
        // The length first: a long string is refused before it is decoded.
        if text.len() != (CURSOR_BYTES * 4).div_ceil(3) {
            return Err(malformed());
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| malformed())?;
        let (version, rest) = bytes.split_first().ok_or_else(malformed)?;
        if *version != CURSOR_VERSION || rest.len() != CURSOR_BYTES - 1 {
            return Err(malformed());
        }
        let (id, seq) = rest.split_at(16);
        let session = SessionId(Uuid::from_slice(id).map_err(|_| malformed())?);
        let next_seq = u64::from_be_bytes(seq.try_into().map_err(|_| malformed())?);
        if next_seq == 0 {
            return Err(malformed());
        }
        Ok(Self { session, next_seq })
    }
}

/// One event of a range, from its index row and its record in the log, with its texts opened.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct HistoryEvent {
    /// The session the event belongs to: an ancestor's for an inherited event.
    pub session_id: SessionId,
    /// Its seq in that session.
    pub seq: u64,
    /// Its kind (one of [`KINDS`]).
    pub kind: String,
    /// When the writer created it (microseconds since the Unix epoch).
    pub occurred_at: i64,
    /// The epoch of the writer that appended it.
    pub writer_epoch: u64,
    /// Its event id.
    pub event_id: Uuid,
    /// Its partition.
    pub log_partition: i32,
    /// Its offset there.
    pub log_offset: i64,
    /// The event this one answers or follows from.
    pub causation_id: Option<Uuid>,
    /// The key that names a side-effecting request to its service.
    pub idempotency_key: Option<String>,
    /// What happened, as the other routes give an event (`{"UserRequest": {...}}`), with its
    /// texts opened; `null` when the record is no longer in the topic (see `missing`).
    pub event: Option<SessionEvent>,
    /// The text fields that did not open, and why: `erased` (the session was erased: its key
    /// is destroyed), `sealed` (this service has no keys), `unreadable`. Such a field keeps
    /// its sealed form without the ciphertext (or is empty, if it was plain text).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unopened: BTreeMap<String, String>,
    /// Why `event` is `null`: the index knows the event, and the topic no longer holds its
    /// record (or it does not decode any more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

/// One page of a range of a session's history.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct EventPage {
    /// The session asked about.
    pub session_id: SessionId,
    /// The events, in order: the inherited ones first (oldest ancestor first), each session's
    /// by seq.
    pub events: Vec<HistoryEvent>,
    /// Pass it as `cursor` (with the same other parameters) for the next page; absent when
    /// the range is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One session's part of a read: its seqs `from..=to`.
#[derive(Clone, Debug)]
struct Segment {
    session: SessionId,
    from: u64,
    to: u64,
    erased: bool,
    /// The redactions its projected state records (seq, field, reason).
    redactions: Vec<(u64, String, String)>,
}

impl Recovery {
    /// One page of `session`'s history in `range`: the index rows of the range (by seq,
    /// filtered by kind), then exactly their records from the log, decoded, and their texts
    /// opened with each session's key. An erased session's texts read as erased, never as an
    /// error. See [`EventRange`] for the inherited history of a fork.
    ///
    /// Errors: [`Error::BadRange`] for input that cannot be answered, [`Error::NotIndexed`]
    /// for a session (or an ancestor) the projection does not have.
    pub async fn events(&self, session: SessionId, range: EventRange) -> Result<EventPage> {
        let range = range.check()?;
        let segments = self.segments(session, &range).await?;
        let (start, start_seq) = match range.cursor {
            Some(cursor) => {
                let i = segments
                    .iter()
                    .position(|s| s.session == cursor.session)
                    .ok_or_else(|| {
                        bad(
                            "bad_cursor",
                            format!(
                                "the cursor is for another read (session {}): pass it with the \
                                 session and parameters of the page that gave it",
                                cursor.session
                            ),
                        )
                    })?;
                (i, cursor.next_seq.max(segments[i].from))
            }
            None => (0, segments.first().map_or(1, |s| s.from)),
        };

        let mut rows: Vec<(usize, IndexRow)> = Vec::new();
        let mut next_cursor = None;
        'segments: for (i, segment) in segments.iter().enumerate().skip(start) {
            let from = if i == start { start_seq } else { segment.from };
            // One row more than the page has room for says whether more remain, and where.
            let room = range.limit - rows.len();
            let found = self
                .store()
                .index_range(segment.session, from, segment.to, &range.kinds, room + 1)
                .await?;
            for row in found {
                if rows.len() == range.limit {
                    next_cursor = Some(
                        Cursor {
                            session: segment.session,
                            next_seq: row.seq,
                        }
                        .encode(),
                    );
                    break 'segments;
                }
                rows.push((i, row));
            }
        }
        let events = self.read_rows(&segments, rows).await?;
        Ok(EventPage {
            session_id: session,
            events,
            next_cursor,
        })
    }

    /// The sessions a read covers, oldest ancestor first: only `session` unless the read is
    /// inherited.
    async fn segments(&self, session: SessionId, range: &CheckedRange) -> Result<Vec<Segment>> {
        let (own, erased) = self.state_for_reading(session).await?;
        let mut segments = vec![Segment {
            session,
            from: range.from,
            to: range.to,
            erased,
            redactions: own.redactions().collect(),
        }];
        let mut parent = if range.inherited { own.parent } else { None };
        while let Some(point) = parent {
            if segments.len() > MAX_ANCESTORS {
                break;
            }
            let ancestor = point.parent_session_id;
            let (state, erased) = self.state_for_reading(ancestor).await?;
            segments.push(Segment {
                session: ancestor,
                from: 1,
                to: point.parent_seq,
                erased,
                redactions: state.redactions().collect(),
            });
            parent = state.parent;
        }
        segments.reverse();
        Ok(segments)
    }

    /// `session`'s projected state and whether its texts read as erased, asked of the store
    /// and the key table at once (a history read's first round trips).
    async fn state_for_reading(&self, session: SessionId) -> Result<(SessionState, bool)> {
        let (state, receipt) = futures::join!(
            self.store().session_state(session),
            self.key_table().receipt(session),
        );
        // A session the store does not have is unknown, whatever the key table answered.
        let state = state?.ok_or_else(|| Error::NotIndexed(session.to_string()))?;
        let erased = reads_as_erased(state.erased, receipt?.is_some());
        Ok((state, erased))
    }

    /// Whether `session`'s texts read as erased: its projected state says so, or its key is
    /// destroyed (a receipt exists), which this process's keyring may not know yet when the
    /// erasure ran elsewhere.
    pub async fn erased_for_reading(&self, session: SessionId, projected: bool) -> Result<bool> {
        Ok(reads_as_erased(
            projected,
            self.key_table().receipt(session).await?.is_some(),
        ))
    }

    /// The records of `rows` from the log, each checked against its row and opened.
    async fn read_rows(
        &self,
        segments: &[Segment],
        rows: Vec<(usize, IndexRow)>,
    ) -> Result<Vec<HistoryEvent>> {
        // One read per (session, partition): a session's events are all on its partition.
        let mut wanted: BTreeMap<(usize, i32), Vec<i64>> = BTreeMap::new();
        for (i, row) in &rows {
            wanted
                .entry((*i, row.log_partition))
                .or_default()
                .push(row.log_offset);
        }
        // The reads and the openers' key lookups, all at once.
        let reads = futures::future::try_join_all(wanted.into_iter().map(
            |((i, partition), offsets)| async move {
                let records = self.log().read_at(partition, &offsets).await?;
                Ok::<_, Error>(((i, partition), records))
            },
        ));
        let read_segments: BTreeSet<usize> = rows.iter().map(|(i, _)| *i).collect();
        let opens = futures::future::try_join_all(read_segments.into_iter().map(|i| async move {
            let segment = &segments[i];
            let opener = self.opener(segment.session, segment.erased).await?;
            Ok::<_, Error>((i, opener.redacted(segment.redactions.iter().cloned())))
        }));
        let (records, openers) = futures::try_join!(reads, opens)?;
        let mut records: BTreeMap<(usize, i32), BTreeMap<i64, EventEnvelope>> =
            records.into_iter().collect();
        let openers: BTreeMap<usize, Opener> = openers.into_iter().collect();
        let mut events = Vec::with_capacity(rows.len());
        for (i, row) in rows {
            let session = segments[i].session;
            let record = records
                .get_mut(&(i, row.log_partition))
                .and_then(|r| r.remove(&row.log_offset));
            let opener = openers.get(&i);
            events.push(history_event(session, row, record, opener)?);
        }
        Ok(events)
    }
}

/// Whether a session's texts read as erased: its projected state says so, or an erasure
/// receipt exists (its key destroyed, perhaps by another process).
fn reads_as_erased(projected: bool, receipt: bool) -> bool {
    projected || receipt
}

/// The answer for one index row and its record (`None`: not in the topic any more).
fn history_event(
    session: SessionId,
    row: IndexRow,
    record: Option<EventEnvelope>,
    opener: Option<&Opener>,
) -> Result<HistoryEvent> {
    let Some(envelope) = record else {
        return Ok(HistoryEvent {
            session_id: session,
            seq: row.seq,
            kind: row.kind,
            occurred_at: row.occurred_at_us,
            writer_epoch: row.epoch,
            event_id: row.event_id,
            log_partition: row.log_partition,
            log_offset: row.log_offset,
            causation_id: None,
            idempotency_key: None,
            event: None,
            unopened: BTreeMap::new(),
            missing: Some(
                "the topic no longer holds this record (retention deleted it), or it no longer \
                 decodes"
                    .to_string(),
            ),
        });
    };
    if envelope.session_id != session
        || envelope.event_id != row.event_id
        || envelope.seq != row.seq
    {
        return Err(Error::IndexMismatch {
            session: session.to_string(),
            seq: row.seq,
            partition: row.log_partition,
            offset: row.log_offset,
        });
    }
    let (opened, unopened) = match opener {
        Some(opener) => opener.open_event(&envelope),
        None => (envelope, Vec::new()),
    };
    let unopened = unopened
        .into_iter()
        .map(|(field, text)| (field.to_string(), unopened_reason(text)))
        .collect();
    Ok(HistoryEvent {
        session_id: session,
        seq: opened.seq,
        kind: opened.event.kind().to_string(),
        occurred_at: opened.occurred_at,
        writer_epoch: opened.writer_epoch,
        event_id: opened.event_id,
        log_partition: row.log_partition,
        log_offset: row.log_offset,
        causation_id: opened.causation_id,
        idempotency_key: opened.idempotency_key,
        event: Some(opened.event),
        unopened,
        missing: None,
    })
}

/// Why a field did not open, as the answer names it (a redaction with its reason:
/// `redacted: WHY`).
fn unopened_reason(text: Text) -> String {
    match text {
        Text::Plain(_) => "opened".into(),
        Text::Sealed => "sealed".into(),
        Text::Erased => "erased".into(),
        Text::Unreadable => "unreadable".into(),
        Text::Redacted(reason) => format!("redacted: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips() {
        for next_seq in [1, 2, 99, u64::from(u32::MAX) + 7, u64::MAX] {
            let cursor = Cursor {
                session: SessionId::new(),
                next_seq,
            };
            let text = cursor.encode();
            assert!(
                text.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{text} needs no escaping in a URL"
            );
            assert_eq!(Cursor::decode(&text).ok(), Some(cursor));
        }
    }

    fn refused_code(text: &str) -> Option<&'static str> {
        match Cursor::decode(text) {
            Err(Error::BadRange { code, .. }) => Some(code),
            _ => None,
        }
    }

    #[test]
    fn a_cursor_not_made_here_is_refused() {
        let good = Cursor {
            session: SessionId::new(),
            next_seq: 5,
        }
        .encode();
        let mut other_version = URL_SAFE_NO_PAD.decode(&good).unwrap_or_default();
        other_version[0] = 2;
        let zero_seq = {
            let mut bytes = URL_SAFE_NO_PAD.decode(&good).unwrap_or_default();
            bytes[17..].fill(0);
            URL_SAFE_NO_PAD.encode(bytes)
        };
        let long = "A".repeat(100_000);
        for bad in [
            "",
            "not a cursor",
            &good[1..],
            &format!("{good}A"),
            &good.replace(|c: char| c.is_ascii_alphanumeric(), "*"),
            &URL_SAFE_NO_PAD.encode(other_version),
            &zero_seq,
            &long,
        ] {
            assert_eq!(refused_code(bad), Some("bad_cursor"), "{bad:?}");
        }
    }

    fn range_code(range: EventRange) -> Option<&'static str> {
        match range.check() {
            Err(Error::BadRange { code, .. }) => Some(code),
            Err(_) => Some("other"),
            Ok(_) => None,
        }
    }

    #[test]
    fn a_range_is_checked_before_anything_is_read() {
        assert_eq!(range_code(EventRange::default()), None);
        let range = EventRange::default().check().ok();
        assert_eq!(
            range.as_ref().map(|r| (r.from, r.to, r.limit)),
            Some((1, u64::MAX, 100))
        );
        let with = |f: fn(&mut EventRange)| {
            let mut range = EventRange::default();
            f(&mut range);
            range_code(range)
        };
        assert_eq!(with(|r| r.limit = Some(0)), Some("bad_limit"));
        assert_eq!(with(|r| r.limit = Some(5000)), Some("bad_limit"));
        assert_eq!(with(|r| r.limit = Some(u64::MAX)), Some("bad_limit"));
        assert_eq!(with(|r| r.limit = Some(1000)), None);
        assert_eq!(with(|r| r.from_seq = Some(0)), Some("bad_range"));
        assert_eq!(
            with(|r| {
                r.from_seq = Some(10);
                r.to_seq = Some(9);
            }),
            Some("bad_range")
        );
        assert_eq!(with(|r| r.to_seq = Some(u64::MAX)), None);
        assert_eq!(
            with(|r| r.kinds = vec!["Nope".into()]),
            Some("unknown_kind")
        );
        assert_eq!(
            with(|r| r.kinds = vec!["UserRequest".into(), "UserRequest".into()]),
            None
        );
        assert_eq!(with(|r| r.cursor = Some("x".into())), Some("bad_cursor"));
    }

    #[test]
    fn an_unknown_kind_is_answered_with_every_kind() {
        let Err(error) = EventRange {
            kinds: vec!["Checkpoints".into()],
            ..EventRange::default()
        }
        .check() else {
            panic!("an unknown kind was accepted");
        };
        let message = error.to_string();
        for kind in KINDS {
            assert!(message.contains(kind), "{message} lacks {kind}");
        }
    }

    #[test]
    fn every_kind_is_listed_under_its_own_name() {
        use sessionlog_schemas::{
            CallOutcome, Content, EffectClass, ForkPoint, ResultSource, TerminalOutcome,
        };
        let text = || Content::plain("");
        let events = [
            SessionEvent::SessionStarted {
                agent: String::new(),
                title: None,
                tenant: String::new(),
                writer_token_sha256: None,
                name_sha256: None,
            },
            SessionEvent::UserRequest { content: text() },
            SessionEvent::ModelResponse {
                model: String::new(),
                tokens_in: 0,
                tokens_out: 0,
                cost_micros: 0,
                started_at: 0,
                content: text(),
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                provider: None,
            },
            SessionEvent::ToolCallRequested {
                tool: String::new(),
                arguments: text(),
                effect: EffectClass::Pure,
                approval_id: None,
            },
            SessionEvent::ToolCallResult {
                call_seq: 1,
                outcome: CallOutcome::Succeeded,
                output: text(),
                source: ResultSource::Executed,
                recorded_by: None,
                note: None,
            },
            SessionEvent::SteeringMessage {
                author: String::new(),
                content: text(),
            },
            SessionEvent::PlanUpdated { plan: text() },
            SessionEvent::ApprovalRequested {
                approval_id: String::new(),
                action: text(),
                action_digest: None,
            },
            SessionEvent::ApprovalDecided {
                approval_id: String::new(),
                approved: true,
                decided_by: String::new(),
                reason: None,
                action_digest: None,
                request_seq: None,
            },
            SessionEvent::Checkpoint {
                state_digest: String::new(),
                workspace_revision: None,
            },
            SessionEvent::WriterClaimed {
                writer: String::new(),
                writer_token_sha256: None,
            },
            SessionEvent::SessionForked {
                fork_point: ForkPoint {
                    parent_session_id: SessionId::new(),
                    parent_seq: 1,
                    parent_partition: 0,
                    parent_offset: 0,
                },
                agent: String::new(),
                tenant: String::new(),
                forked_by: None,
                inherited_approvals: Vec::new(),
                writer_token_sha256: None,
            },
            SessionEvent::ResolutionRequired {
                call_seq: 1,
                reason: text(),
            },
            SessionEvent::SessionPaused {
                reason: None,
                until: None,
            },
            SessionEvent::SessionResumed {},
            SessionEvent::SessionEnded {
                outcome: TerminalOutcome::Completed,
                reason: None,
            },
            SessionEvent::SessionErased {
                requested_by: String::new(),
                reason: String::new(),
            },
            SessionEvent::ContextSummarized {
                first_seq: 1,
                last_seq: 1,
                summarized_by: String::new(),
                summary: text(),
            },
            SessionEvent::EventRetracted {
                retracted_seq: 1,
                retracted_by: String::new(),
            },
            SessionEvent::FrameworkStateSaved {
                framework: String::new(),
                key: String::new(),
                state: text(),
            },
            SessionEvent::PayloadRedacted {
                redacted_seq: 1,
                field: String::new(),
                redacted_by: String::new(),
                reason: String::new(),
                redacted_at: 0,
                key_id: String::new(),
                key_destroyed: false,
            },
        ];
        assert_eq!(events.len(), KINDS.len());
        for (i, event) in events.iter().enumerate() {
            assert_eq!(kind_index(event), i);
            assert_eq!(KINDS[i], event.kind());
        }
    }

    /// [`KINDS`]' position of an event's kind. Exhaustive on purpose: a new kind of event does
    /// not compile (in the tests, which clippy builds) until it is listed here and in [`KINDS`].
    fn kind_index(event: &SessionEvent) -> usize {
        match event {
            SessionEvent::SessionStarted { .. } => 0,
            SessionEvent::UserRequest { .. } => 1,
            SessionEvent::ModelResponse { .. } => 2,
            SessionEvent::ToolCallRequested { .. } => 3,
            SessionEvent::ToolCallResult { .. } => 4,
            SessionEvent::SteeringMessage { .. } => 5,
            SessionEvent::PlanUpdated { .. } => 6,
            SessionEvent::ApprovalRequested { .. } => 7,
            SessionEvent::ApprovalDecided { .. } => 8,
            SessionEvent::Checkpoint { .. } => 9,
            SessionEvent::WriterClaimed { .. } => 10,
            SessionEvent::SessionForked { .. } => 11,
            SessionEvent::ResolutionRequired { .. } => 12,
            SessionEvent::SessionPaused { .. } => 13,
            SessionEvent::SessionResumed { .. } => 14,
            SessionEvent::SessionEnded { .. } => 15,
            SessionEvent::SessionErased { .. } => 16,
            SessionEvent::ContextSummarized { .. } => 17,
            SessionEvent::EventRetracted { .. } => 18,
            SessionEvent::FrameworkStateSaved { .. } => 19,
            SessionEvent::PayloadRedacted { .. } => 20,
        }
    }
}
