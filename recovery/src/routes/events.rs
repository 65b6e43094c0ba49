//! `GET /v1/sessions/{session_id}/events`: a range of a session's history, a page at a time.

use super::{Answer, LIMITS, number, projected_tenant};
use crate::history::clip;
use crate::{Error, EventPage, EventRange, Recovery};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use sessionlog_http::{Authorized, Problem, QueryParams, Reader, ServerProblems, SessionPath};
use std::sync::Arc;

/// The query of `GET /sessions/{session_id}/events`. Every member is taken as text and parsed
/// here, so a value that is not a number says which parameter and what it takes. A parameter
/// it does not know is refused: `from=5` for `from_seq=5` would otherwise read from seq 1.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    from_seq: Option<String>,
    to_seq: Option<String>,
    kinds: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    inherited: Option<String>,
}

impl EventsQuery {
    /// The range asked for (not yet checked: [`EventRange::validate`] does that). An empty
    /// parameter (`limit=`) is one not given.
    fn range(self) -> Result<EventRange, Problem> {
        let given = |value: Option<String>| value.filter(|v| !v.is_empty());
        let inherited = match given(self.inherited).as_deref() {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(other) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "bad_query",
                    format!("inherited must be true or false, not {:?}", clip(other)),
                ));
            }
        };
        Ok(EventRange {
            from_seq: number("from_seq", "bad_range", SEQS, given(self.from_seq))?,
            to_seq: number("to_seq", "bad_range", SEQS, given(self.to_seq))?,
            kinds: self
                .kinds
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|kind| !kind.is_empty())
                .map(str::to_string)
                .collect(),
            limit: number("limit", "bad_limit", LIMITS, given(self.limit))?,
            cursor: given(self.cursor),
            inherited,
        })
    }
}

/// What a seq parameter takes.
const SEQS: &str = "a whole number from 1 (a session's first event)";

sessionlog_http::problems! {
    /// What a range of a session's history may refuse.
    EventsProblems {
        400 => "`bad_session_id`, `bad_range` (`to_seq` before `from_seq`, `from_seq` 0, not a \
                number), `bad_limit` (not 1 to 1000), `unknown_kind` (the detail lists the \
                kinds), `bad_cursor`, `bad_query` (an unknown or repeated parameter, `inherited` \
                not a boolean)",
        404 => "`unknown_session`: not in the event index (unknown, or not projected yet)",
    } + ServerProblems
}

/// A range of a session's history: the events with `from_seq <= seq <= to_seq` (of `kinds`),
/// a page of at most `limit` at a time, located by the event index and read from the log,
/// with their texts opened (an erased session's read as erased). With `inherited=true` a
/// fork's inherited events come first: each ancestor's from seq 1 through the point the next
/// session forked at, oldest ancestor first, each tagged with its own `session_id`; `from_seq`
/// and `to_seq` apply to the session's own seqs only. Events the projector has not applied
/// yet are not in the index, so not in the answer.
#[utoipa::path(
    get,
    path = "/sessions/{session_id}/events",
    tag = "sessions",
    params(
        SessionPath,
        ("from_seq" = Option<u64>, Query, minimum = 1, description = "the first seq of the session's own events (default 1)"),
        ("to_seq" = Option<u64>, Query, description = "the last seq of the session's own events (default: its last); not before `from_seq`"),
        ("kinds" = Option<String>, Query, description = "only these kinds, comma-separated (`UserRequest,ModelResponse`); default every kind"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "events per page, 1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "the previous page's `next_cursor`, with the same other parameters"),
        ("inherited" = Option<bool>, Query, description = "a fork's inherited events first (default false)"),
    ),
    responses(
        (status = 200, description = "one page; `next_cursor` when more remain", body = EventPage),
        EventsProblems,
    )
)]
pub(crate) async fn events(
    State(recovery): State<Arc<Recovery>>,
    Authorized(caller, _): Authorized<Reader>,
    SessionPath(session): SessionPath,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Answer<EventPage> {
    // The request is checked whole before anything is read.
    let range = query.range()?;
    range.validate()?;
    if caller.tenant.is_some() {
        // The read goes by the projection, so the tenant does too: a session it does not have
        // is unknown here whoever asks.
        let tenant = projected_tenant(&recovery, session)
            .await?
            .ok_or_else(|| Error::NotIndexed(session.to_string()))?;
        caller.require_tenant(session, &tenant)?;
    }
    Ok(Json(recovery.events(session, range).await?))
}
