//! Keeping an erased session's texts from leaving after its erasure. The export opens a
//! session's texts as it follows the session, and may send them much later: behind the log,
//! or retrying a receiver in trouble. So before every request to the receiver (each retry
//! included), it asks the key store whether each session whose text a span of the request
//! carries was erased, and sends that session's spans without their texts.
//!
//! Without the texts rather than without the spans: a trace consumer keeps the session's
//! shape (its spans, times, tokens and outcomes), as it gets it for a session erased before
//! the export met it and for every session without `--with-content`; only what was said goes.

use crate::Result;
use crate::genai::{carries_content, session_of, strip_content};
use futures::StreamExt;
use opentelemetry_sdk::trace::SpanData;
use sessionlog_keys::{DataKeyStore, KeyState, Keyring, StoredKey};
use sessionlog_schemas::SessionId;
use std::collections::HashSet;

/// Sessions asked about at once.
const CONCURRENT_QUESTIONS: usize = 16;

/// Where the export learns of erasures, and what it learnt.
pub(crate) struct Erasures<'a> {
    /// The key table (it marks an erasure with encryption on or off), and the keyring when
    /// encryption is on, asked through so that its cached key is dropped at once. `None`
    /// when no content is exported: there is nothing to withhold.
    keys: Option<(&'a dyn DataKeyStore, Option<&'a Keyring>)>,
    /// Sessions found erased during the export.
    known: &'a mut HashSet<SessionId>,
    /// Of those, the ones found since [`Self::found`] was last called.
    found: Vec<SessionId>,
}

impl<'a> Erasures<'a> {
    /// Erasures read from `keys`, adding to `known`; `keys` is `None` when no content is
    /// exported.
    pub(crate) fn new(
        keys: Option<(&'a dyn DataKeyStore, Option<&'a Keyring>)>,
        known: &'a mut HashSet<SessionId>,
    ) -> Self {
        Self {
            keys,
            known,
            found: Vec::new(),
        }
    }

    /// Nothing is asked: for spans that carry no content.
    #[cfg(test)]
    pub(crate) fn none(known: &'a mut HashSet<SessionId>) -> Self {
        Self::new(None, known)
    }

    /// Sessions found erased since the last call: the export drops their keys and texts.
    pub(crate) fn found(&mut self) -> Vec<SessionId> {
        std::mem::take(&mut self.found)
    }

    /// Removes the texts of every span of `spans` whose session is erased now, asking the
    /// key store about each session with a text there; how many spans lost theirs.
    pub(crate) async fn withhold(&mut self, spans: &mut [SpanData]) -> Result<u64> {
        let Some((table, keyring)) = self.keys else {
            return Ok(0);
        };
        let asking: HashSet<SessionId> = spans
            .iter()
            .filter(|span| carries_content(span))
            .map(session_of)
            .filter(|session| !self.known.contains(session))
            .collect();
        let mut answers = futures::stream::iter(asking)
            .map(|session| async move { (session, erased_now(table, keyring, session).await) })
            .buffer_unordered(CONCURRENT_QUESTIONS);
        while let Some((session, erased)) = answers.next().await {
            if erased? {
                self.known.insert(session);
                self.found.push(session);
            }
        }
        let mut withheld = 0;
        for span in spans.iter_mut() {
            if self.known.contains(&session_of(span)) && strip_content(span) {
                withheld += 1;
            }
        }
        if withheld > 0 {
            metrics::counter!(crate::observe::CONTENT_WITHHELD).increment(withheld);
            tracing::info!(
                spans = withheld,
                "sending spans without the texts of sessions erased since they were opened"
            );
        }
        Ok(withheld)
    }
}

/// Whether the key store says `session` is erased now (whatever a cache holds), trying a
/// store in trouble a few times.
async fn erased_now(
    table: &dyn DataKeyStore,
    keyring: Option<&Keyring>,
    session: SessionId,
) -> sessionlog_keys::Result<bool> {
    use sessionlog_log::retry::{self, Retryable};
    let ask = || async move {
        Ok(match keyring {
            Some(keyring) => matches!(keyring.key_now(session).await?, KeyState::Destroyed),
            None => matches!(table.get(session).await?, Some(StoredKey::Destroyed { .. })),
        })
    };
    ask.retry(retry::tries(5))
        .when(sessionlog_keys::Error::is_store)
        .await
}
