//! Rebuilding a session's state from topic offsets.

use crate::{Error, Result};
use scylla::client::session::Session;
use serde::Serialize;
use sessionlog_log::{PartitionReader, Settings, partitioner, topic};
use sessionlog_projector::ProjectionStore;
use sessionlog_schemas::{EventDecoder, SchemaRegistry, SessionId};
use sessionlog_session::SessionState;

/// Where a rebuild started reading.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum StartPoint {
    /// After the latest checkpoint the projector verified, from its stored state.
    Checkpoint {
        /// The checkpoint's seq.
        seq: u64,
        /// Its offset.
        offset: i64,
    },
    /// At the session's first event, as the event index gives it.
    FirstEvent {
        /// Its offset.
        offset: i64,
    },
    /// At the start of the partition: the tables know nothing of the session.
    PartitionStart {
        /// The partition's first offset.
        offset: i64,
    },
}

/// A session rebuilt from the log.
#[derive(Clone, Debug, Serialize)]
pub struct RebuiltSession {
    /// The folded state.
    pub state: SessionState,
    /// The session's partition.
    pub partition: i32,
    /// Where reading began.
    pub start: StartPoint,
    /// The partition's end when reading stopped (next offset to be written).
    pub end_offset: i64,
    /// Records read from the partition (any session).
    pub records_read: u64,
    /// Records of this session folded.
    pub events_folded: u64,
}

/// Rebuilds sessions from the log.
pub struct Recovery {
    settings: Settings,
    decoder: EventDecoder,
    store: ProjectionStore,
    partitions: i32,
}

impl Recovery {
    /// Connects to the registry, the store and the cluster (to learn the partition count).
    pub async fn connect(settings: &Settings) -> Result<Self> {
        let decoder = EventDecoder::new(SchemaRegistry::new(settings.registry.url.clone())?);
        let store = ProjectionStore::connect(&settings.cql).await?;
        let partitions = topic::partition_count(&settings.kafka, &settings.kafka.topic).await?;
        Ok(Self {
            settings: settings.clone(),
            decoder,
            store,
            partitions,
        })
    }

    /// The projection store recovery reads checkpoints and the index from.
    pub fn store(&self) -> &ProjectionStore {
        &self.store
    }

    /// Rebuilds `session`: from its latest verified checkpoint if any, else from its first
    /// event, reading its partition to the end and folding its events.
    pub async fn rebuild(&self, session: SessionId) -> Result<RebuiltSession> {
        let partition = partitioner::partition_for(session, self.partitions);
        let reader = PartitionReader::new(&self.settings.kafka, &self.settings.kafka.topic)?;
        let (start, mut state) = self.start_point(session, partition, &reader).await?;
        let from = match &start {
            StartPoint::Checkpoint { offset, .. } => offset + 1,
            StartPoint::FirstEvent { offset } | StartPoint::PartitionStart { offset } => *offset,
        };
        let key = partitioner::session_key(session);
        let mut matching = Vec::new();
        let mut records_read = 0u64;
        let end_offset = reader
            .read_to_end(partition, from, |record| {
                records_read += 1;
                if record.key.as_deref() == Some(key.as_bytes()) {
                    matching.push(record);
                }
            })
            .await?;
        let mut events_folded = 0;
        for record in matching {
            let Some(payload) = record.payload.as_deref() else {
                continue;
            };
            // A record of this session that does not decode is the projector's dead letter;
            // recovery skips it the same way so both folds see the same events.
            match self.decoder.decode(payload).await {
                Ok(event) if event.session_id == session => {
                    state.apply(&event);
                    events_folded += 1;
                }
                Ok(_) => {}
                Err(e) if e.is_retriable() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(offset = record.offset, error = %e, "skipping undecodable record")
                }
            }
        }
        if !state.is_started() {
            return Err(Error::UnknownSession(session.to_string()));
        }
        Ok(RebuiltSession {
            state,
            partition,
            start,
            end_offset,
            records_read,
            events_folded,
        })
    }

    async fn start_point(
        &self,
        session: SessionId,
        partition: i32,
        reader: &PartitionReader,
    ) -> Result<(StartPoint, SessionState)> {
        if let Some((seq, offset, state)) = latest_verified_checkpoint(&self.store, session).await?
        {
            return Ok((StartPoint::Checkpoint { seq, offset }, state));
        }
        let empty = SessionState::empty(session);
        if let Some((p, offset)) = self.store.locate(session, 1).await?
            && p == partition
        {
            return Ok((StartPoint::FirstEvent { offset }, empty));
        }
        let (low, _) = reader.watermarks(partition).await?;
        Ok((StartPoint::PartitionStart { offset: low }, empty))
    }
}

/// The newest checkpoint whose declared digest the projector confirmed, with its state.
async fn latest_verified_checkpoint(
    store: &ProjectionStore,
    session: SessionId,
) -> Result<Option<(u64, i64, SessionState)>> {
    let cql: &Session = store.cql();
    let query = format!(
        "SELECT seq, log_offset, verified, state_json FROM {}.checkpoints WHERE session_id = ?",
        store.keyspace()
    );
    let store_error = |e: &dyn std::fmt::Display| {
        Error::Store(sessionlog_projector::Error::Store {
            action: "read checkpoints",
            message: e.to_string(),
        })
    };
    let rows = cql
        .query_unpaged(query, (session.0,))
        .await
        .map_err(|e| store_error(&e))?
        .into_rows_result()
        .map_err(|e| store_error(&e))?;
    // Clustering order is seq DESC: the first verified row is the latest.
    for row in rows
        .rows::<(i64, i64, Option<bool>, Option<String>)>()
        .map_err(|e| store_error(&e))?
    {
        let (seq, offset, verified, state_json) = row.map_err(|e| store_error(&e))?;
        if verified != Some(true) {
            continue;
        }
        if let Some(state) = state_json.and_then(|j| serde_json::from_str(&j).ok()) {
            return Ok(Some((seq as u64, offset, state)));
        }
    }
    Ok(None)
}
