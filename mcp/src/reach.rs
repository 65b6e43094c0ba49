//! What a caller may read through the served session, and the one check every seq, range and
//! cursor a tool or resource is handed goes through ([`Readable`]): the served session's own
//! events, and each ancestor's up to the seq the next session down forked at. A read is made of
//! [`Span`]s, and only [`Readable`] makes one, so no tool can read past a fork point however it
//! is asked (a search cursor naming the parent at seq 100,000 read the parent's events after the
//! fork while the other tools refused it, each with a check of its own).

use crate::{Error, Result};
use serde::Serialize;
use sessionlog_recovery::Cursor;
use sessionlog_schemas::SessionId;

/// One session a read may cover: the served session (every seq) or an ancestor (its seqs up to
/// the point the next session down forked at).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Reach {
    /// The session.
    pub session_id: SessionId,
    /// The last seq readable through the served session (`None`: every seq, the session's own).
    pub through_seq: Option<u64>,
}

/// The sessions a caller reads through the served one, and how far in each: the served session
/// first, then its parent, grandparent and so on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readable {
    reach: Vec<Reach>,
    /// The served session's last seq when the reach was taken: where a search or a scan of it
    /// starts, and the end of a range that names none.
    served_last: u64,
}

/// Seqs `first..=last` of one session, all inside what the caller may read (empty when `first`
/// is past `last`). Made only by [`Readable`], and only narrowed after that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    session: SessionId,
    first: u64,
    last: u64,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::Invalid(reason.into())
}

fn not_a_search_cursor() -> Error {
    invalid("the cursor is not one this search gave out: pass next_cursor as it came")
}

impl Readable {
    /// `served` (whose last seq is `served_last`) and its ancestors, nearest first, each with
    /// the seq the next session down forked at.
    pub fn new(
        served: SessionId,
        served_last: u64,
        ancestors: impl IntoIterator<Item = (SessionId, u64)>,
    ) -> Self {
        let own = Reach {
            session_id: served,
            through_seq: None,
        };
        let reach = std::iter::once(own)
            .chain(ancestors.into_iter().map(|(session_id, through)| Reach {
                session_id,
                through_seq: Some(through),
            }))
            .collect();
        Self { reach, served_last }
    }

    /// The served session, then each ancestor with how far it reads.
    pub fn reach(&self) -> &[Reach] {
        &self.reach
    }

    /// The reach of `asked` (default: the served session); [`Error::UnknownSession`] for a
    /// session outside the served one's line of ancestors.
    pub fn session(&self, asked: Option<SessionId>) -> Result<Reach> {
        let asked = asked.unwrap_or(self.reach[0].session_id);
        self.reach
            .iter()
            .copied()
            .find(|r| r.session_id == asked)
            .ok_or(Error::UnknownSession(asked))
    }

    /// The last seq of `reach` readable here: the fork point of an ancestor, the served
    /// session's last seq.
    fn top(&self, reach: Reach) -> u64 {
        reach.through_seq.unwrap_or(self.served_last)
    }

    /// The seqs `from..=to` of `asked` (defaults: 1, and the last readable), continued at
    /// `cursor` (a `history_read` page's `next_cursor`, for the same range) when given. A range
    /// reaching past an ancestor's fork point ends there; one starting past it, seq 0, a
    /// range ending before it starts and a cursor of another session or outside the range are
    /// refused. The served session's range may start past its last seq (it reads nothing).
    pub fn range(
        &self,
        asked: Option<SessionId>,
        from: Option<u64>,
        to: Option<u64>,
        cursor: Option<&str>,
    ) -> Result<Span> {
        let reach = self.session(asked)?;
        let first = from.unwrap_or(1);
        if first == 0 {
            return Err(invalid(
                "from_seq must be at least 1 (a session's first event is seq 1)",
            ));
        }
        if let Some(to) = to
            && to < first
        {
            return Err(invalid(format!(
                "to_seq ({to}) is before from_seq ({first})"
            )));
        }
        let top = self.top(reach);
        if let Some(through) = reach.through_seq
            && first > through
        {
            return Err(invalid(format!(
                "session {} is readable here through seq {through} only (where the next \
                 session forked from it)",
                reach.session_id
            )));
        }
        let mut span = Span {
            session: reach.session_id,
            first,
            last: to.map_or(top, |to| to.min(top)),
        };
        if let Some(text) = cursor {
            let cursor = Cursor::decode(text)?;
            // A page's cursor names the session and seq its next page starts at, inside the
            // range it was given for.
            let within = span.first <= cursor.next_seq && cursor.next_seq <= span.last;
            if cursor.session != span.session || !within {
                return Err(invalid(
                    "the cursor is for another read: pass it with the session_id, from_seq and \
                     to_seq of the page that gave it",
                ));
            }
            span.first = cursor.next_seq;
        }
        Ok(span)
    }

    /// The one event at `seq` of `asked` (default: the served session), refused when it is
    /// seq 0 or past what `asked` reads here.
    pub fn seq(&self, asked: Option<SessionId>, seq: u64) -> Result<Span> {
        let reach = self.session(asked)?;
        if seq == 0 {
            return Err(invalid("seqs start at 1"));
        }
        match reach.through_seq {
            Some(through) if seq > through => Err(invalid(format!(
                "session {} is readable here through seq {through} only",
                reach.session_id
            ))),
            _ => Ok(Span {
                session: reach.session_id,
                first: seq,
                last: seq,
            }),
        }
    }

    /// What a search reads, newest first: the served session and (when `inherited`) each
    /// ancestor through its fork point; from `cursor` on (`{session}:{seq}`, a search's
    /// `next_cursor`: that seq and below, then the sessions further up the line) when given.
    /// A cursor naming a session out of the search's reach, seq 0, or a seq past what its
    /// session reads here is refused.
    pub fn searched(&self, inherited: bool, cursor: Option<&str>) -> Result<Vec<Span>> {
        let sessions = if inherited { self.reach.len() } else { 1 };
        let mut spans: Vec<Span> = self.reach[..sessions]
            .iter()
            .map(|&reach| Span {
                session: reach.session_id,
                first: 1,
                last: self.top(reach),
            })
            .collect();
        let Some(text) = cursor else {
            return Ok(spans);
        };
        let (session, seq) = decode_search_cursor(text)?;
        let at = spans
            .iter()
            .position(|span| span.session == session)
            .ok_or_else(not_a_search_cursor)?;
        if seq > spans[at].last {
            return Err(not_a_search_cursor());
        }
        spans.drain(..at);
        spans[0].last = seq;
        Ok(spans)
    }
}

/// A search cursor: the session and the seq to continue below (inclusive).
pub fn search_cursor(session: SessionId, seq: u64) -> String {
    format!("{session}:{seq}")
}

fn decode_search_cursor(text: &str) -> Result<(SessionId, u64)> {
    if text.len() > 64 {
        return Err(not_a_search_cursor());
    }
    let (session, seq) = text.split_once(':').ok_or_else(not_a_search_cursor)?;
    let session = session.parse().map_err(|_| not_a_search_cursor())?;
    let seq: u64 = seq.parse().map_err(|_| not_a_search_cursor())?;
    if seq == 0 {
        return Err(not_a_search_cursor());
    }
    Ok((session, seq))
}

impl Span {
    /// The session.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The first seq.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last seq.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Whether it holds no seq.
    pub fn is_empty(&self) -> bool {
        self.first > self.last
    }

    /// This span from `seq` on (empty when `seq` is past it).
    pub fn starting_at(&self, seq: u64) -> Span {
        Span {
            first: self.first.max(seq),
            ..*self
        }
    }

    /// The last `count` seqs of this span up to `top` (fewer at its start); `None` once `top`
    /// is below it.
    pub fn window_below(&self, top: u64, count: u64) -> Option<Span> {
        let last = top.min(self.last);
        if last < self.first || count == 0 {
            return None;
        }
        Some(Span {
            first: last.saturating_sub(count.saturating_sub(1)).max(self.first),
            last,
            ..*self
        })
    }

    /// The first `count` seqs of this span from `bottom` on (fewer at its end); `None` once
    /// `bottom` is past it.
    pub fn window_above(&self, bottom: u64, count: u64) -> Option<Span> {
        let first = bottom.max(self.first);
        if first > self.last || count == 0 {
            return None;
        }
        Some(Span {
            first,
            last: first.saturating_add(count.saturating_sub(1)).min(self.last),
            ..*self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fork `c` (its last seq 20) of `p` at seq 3, itself a fork of `g` at seq 7.
    fn family() -> (Readable, SessionId, SessionId, SessionId) {
        let (c, p, g) = (SessionId::new(), SessionId::new(), SessionId::new());
        (Readable::new(c, 20, [(p, 3), (g, 7)]), c, p, g)
    }

    fn page_cursor(session: SessionId, next_seq: u64) -> String {
        Cursor { session, next_seq }.encode()
    }

    fn bounds(span: Span) -> (SessionId, u64, u64) {
        (span.session(), span.first(), span.last())
    }

    #[test]
    fn a_range_of_an_ancestor_ends_at_its_fork_point() {
        let (r, c, p, g) = family();
        assert_eq!(
            bounds(r.range(Some(p), None, None, None).unwrap()),
            (p, 1, 3)
        );
        assert_eq!(
            bounds(r.range(Some(p), Some(2), Some(u64::MAX), None).unwrap()),
            (p, 2, 3)
        );
        assert_eq!(
            bounds(r.range(Some(g), None, Some(100_000), None).unwrap()),
            (g, 1, 7)
        );
        assert_eq!(bounds(r.range(None, None, None, None).unwrap()), (c, 1, 20));
        assert_eq!(
            bounds(r.range(Some(c), Some(5), Some(u64::MAX), None).unwrap()),
            (c, 5, 20)
        );
        // The served session's range past its end reads nothing; an ancestor's is refused.
        assert!(r.range(None, Some(21), None, None).unwrap().is_empty());
        for refused in [
            r.range(Some(p), Some(4), None, None),
            r.range(Some(p), Some(u64::MAX), None, None),
            r.range(Some(p), Some(0), Some(3), None),
            r.range(None, Some(0), None, None),
            r.range(Some(p), Some(3), Some(2), None),
            r.range(Some(SessionId::new()), None, None, None),
        ] {
            assert!(refused.is_err(), "{refused:?}");
        }
    }

    #[test]
    fn a_page_cursor_continues_only_the_range_it_came_from() {
        let (r, c, p, _) = family();
        assert_eq!(
            bounds(
                r.range(Some(p), None, None, Some(&page_cursor(p, 2)))
                    .unwrap()
            ),
            (p, 2, 3)
        );
        assert_eq!(
            bounds(r.range(None, None, None, Some(&page_cursor(c, 9))).unwrap()),
            (c, 9, 20)
        );
        for (asked, from, to, cursor) in [
            // Past the fork point, or anywhere past the range asked.
            (Some(p), None, None, page_cursor(p, 4)),
            (Some(p), None, None, page_cursor(p, u64::MAX)),
            (Some(p), None, Some(2), page_cursor(p, 3)),
            (None, Some(5), None, page_cursor(c, 4)),
            // Another session's cursor.
            (None, None, None, page_cursor(p, 2)),
            (Some(p), None, None, page_cursor(c, 2)),
            (Some(p), None, None, page_cursor(SessionId::new(), 2)),
            // Not a cursor at all.
            (Some(p), None, None, format!("{p}:2")),
        ] {
            let refused = r.range(asked, from, to, Some(&cursor));
            assert!(refused.is_err(), "{asked:?} {from:?} {to:?}: {refused:?}");
        }
    }

    #[test]
    fn one_seq_is_refused_past_the_fork_point_and_at_zero() {
        let (r, c, p, _) = family();
        assert_eq!(bounds(r.seq(Some(p), 3).unwrap()), (p, 3, 3));
        assert_eq!(bounds(r.seq(None, 20).unwrap()), (c, 20, 20));
        for refused in [
            r.seq(Some(p), 4),
            r.seq(Some(p), u64::MAX),
            r.seq(Some(p), 0),
            r.seq(None, 0),
            r.seq(Some(SessionId::new()), 1),
        ] {
            assert!(refused.is_err(), "{refused:?}");
        }
    }

    #[test]
    fn a_search_goes_down_the_line_from_its_cursor_and_never_past_a_fork_point() {
        let (r, c, p, g) = family();
        let all: Vec<_> = r
            .searched(true, None)
            .unwrap()
            .into_iter()
            .map(bounds)
            .collect();
        assert_eq!(all, [(c, 1, 20), (p, 1, 3), (g, 1, 7)]);
        let own: Vec<_> = r
            .searched(false, None)
            .unwrap()
            .into_iter()
            .map(bounds)
            .collect();
        assert_eq!(own, [(c, 1, 20)]);
        let from_p: Vec<_> = r
            .searched(true, Some(&search_cursor(p, 2)))
            .unwrap()
            .into_iter()
            .map(bounds)
            .collect();
        assert_eq!(from_p, [(p, 1, 2), (g, 1, 7)]);
        let from_c: Vec<_> = r
            .searched(true, Some(&search_cursor(c, 20)))
            .unwrap()
            .into_iter()
            .map(bounds)
            .collect();
        assert_eq!(from_c[0], (c, 1, 20));
        for (inherited, cursor) in [
            (true, search_cursor(p, 4)),
            (true, search_cursor(p, 100_000)),
            (true, search_cursor(p, u64::MAX)),
            (true, search_cursor(g, 8)),
            (true, search_cursor(c, 21)),
            (true, search_cursor(c, u64::MAX)),
            (true, format!("{p}:0")),
            (true, search_cursor(SessionId::new(), 1)),
            // Out of the search when it is not inherited.
            (false, search_cursor(p, 1)),
            (true, page_cursor(p, 2)),
            (true, String::new()),
            (true, "x:1".into()),
            (true, format!("{p}:-1")),
            (true, format!("{p}")),
            (true, "9".repeat(100)),
        ] {
            let refused = r.searched(inherited, Some(&cursor));
            assert!(refused.is_err(), "{cursor}: {refused:?}");
        }
    }

    #[test]
    fn windows_stay_inside_their_span() {
        let (r, _, p, _) = family();
        let span = r.range(Some(p), None, None, None).unwrap();
        let below = |top, count| span.window_below(top, count).map(|w| (w.first(), w.last()));
        assert_eq!(below(u64::MAX, 1000), Some((1, 3)));
        assert_eq!(below(3, 2), Some((2, 3)));
        assert_eq!(below(1, 2), Some((1, 1)));
        assert_eq!(below(0, 2), None);
        assert_eq!(below(3, 0), None);
        let above = |bottom, count| {
            span.window_above(bottom, count)
                .map(|w| (w.first(), w.last()))
        };
        assert_eq!(above(0, u64::MAX), Some((1, 3)));
        assert_eq!(above(2, 1), Some((2, 2)));
        assert_eq!(above(4, 1), None);
        assert_eq!(above(u64::MAX, u64::MAX), None);
        assert_eq!(bounds(span.starting_at(2)), (p, 2, 3));
        assert_eq!(bounds(span.starting_at(0)), (p, 1, 3));
        assert!(span.starting_at(4).is_empty());
        assert!(span.starting_at(u64::MAX).window_above(0, 1000).is_none());
    }
}
