//! Opening sealed texts for the service's answers: the one place recovery turns ciphertext
//! into text, for a caller the routes already let see the session.

use crate::{LoggedEvent, Recovery, Result};
use sessionlog_keys::Opener;
use sessionlog_schemas::SessionId;
use sessionlog_session::SessionState;

impl Recovery {
    /// What opens `session`'s texts here: its data key when encryption is on (none opens
    /// once it is destroyed), nothing otherwise. `erased` (the session's state says so) makes
    /// every text read as erased, plain text written before encryption was on included.
    pub async fn opener(&self, session: SessionId, erased: bool) -> Result<Opener> {
        let opener = match self.log().keyring() {
            Some(keyring) => keyring.opener(session).await?,
            None => Opener::without_keys(session),
        };
        Ok(opener.erased(erased))
    }

    /// [`Self::opener`] for a reader holding `session`'s `state`: every field the state records
    /// as redacted reads as redacted, whatever key this process holds. A key this process
    /// cached before a redaction made elsewhere still derives the field's own key until its
    /// answer is `key_cache_secs` old; the redaction's event is what every reader has at once.
    pub async fn opener_for(
        &self,
        session: SessionId,
        state: &SessionState,
        erased: bool,
    ) -> Result<Opener> {
        Ok(self
            .opener(session, erased)
            .await?
            .redacted(state.redactions()))
    }
}

/// A copy of `state` with its texts opened (what does not open keeps its sealed form without
/// the ciphertext). Digests are taken before: they cover the sealed form.
pub fn opened_state(opener: &Opener, state: &SessionState) -> SessionState {
    let mut opened = state.clone();
    opened.texts_mut(|text| {
        opener.open_in_place(text);
    });
    opened
}

/// Opens every event of `events` in place, each checked against its own seq and field.
pub fn open_events(opener: &Opener, events: &mut [LoggedEvent]) {
    for event in events {
        event.envelope = opener.open_event(&event.envelope).0;
    }
}
