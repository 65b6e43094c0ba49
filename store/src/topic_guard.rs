//! Telling the topic a keyspace was projected from from another of the same name.
//!
//! Progress is stored by topic name. A topic deleted and created again under that name starts
//! its offsets at zero: a projector trusting the old progress would skip the new records below
//! it, and a writer catching a session up from its row would read the log after an offset
//! that now means something else. Each progress row therefore also records the key and
//! timestamp of the last record it covers; [`ProjectionStore::check_topic`] reads that record
//! back from the log and refuses to go on when the log holds something else there.

use crate::{Error, ProjectionStore, Result};
use sessionlog_log::{KafkaSettings, PartitionReader, RawRecord, Settings};

/// The record just before a partition's stored progress: its key and timestamp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LastRecord {
    /// The record key (a session id), as text.
    pub key: Option<String>,
    /// The record's timestamp, in milliseconds.
    pub timestamp_ms: Option<i64>,
}

impl LastRecord {
    /// What `record` leaves as a partition's last applied record.
    pub fn of(record: &RawRecord) -> Self {
        Self {
            key: record
                .key
                .as_deref()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// A partition's stored progress with the record it ends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressMark {
    /// The next offset to apply.
    pub next_offset: i64,
    /// The record at `next_offset - 1`, if this build's projector wrote the progress.
    pub last: Option<LastRecord>,
}

impl ProjectionStore {
    /// [`ProjectionStore::open`], then [`Self::check_topic`]: how services that catch writers
    /// up from the projection (ingest, recovery) open it, so that none reads a recreated topic
    /// through the old one's progress.
    pub async fn open_checked(settings: &Settings) -> Result<Self> {
        let store = Self::open(&settings.cql).await?;
        store.check_topic(&settings.kafka).await?;
        Ok(store)
    }

    /// Every partition's stored progress on `topic` with the record it ends on.
    pub async fn load_progress_marks(
        &self,
        topic: &str,
    ) -> Result<std::collections::BTreeMap<i32, ProgressMark>> {
        type Row = (i32, Option<i64>, Option<String>, Option<i64>);
        let rows: Vec<Row> = self
            .select(
                &self.reads.load_progress_marks,
                (topic,),
                "load partition progress marks",
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(partition, next, key, timestamp_ms)| {
                let last = (key.is_some() || timestamp_ms.is_some())
                    .then_some(LastRecord { key, timestamp_ms });
                let next_offset = next.unwrap_or_default();
                (partition, ProgressMark { next_offset, last })
            })
            .collect())
    }

    /// Checks that the topic of `kafka` is the log this keyspace's progress was made on: for
    /// each partition with progress, the record before it must still be the one applied
    /// there. Fails with [`Error::TopicRecreated`], which tells the operator what to do, when
    /// it is not. Progress written before this check existed (no record noted) and records
    /// already removed by retention are passed over: there is nothing to compare.
    pub async fn check_topic(&self, kafka: &KafkaSettings) -> Result<()> {
        let topic = kafka.topic.as_str();
        let log_error = |source| Error::Log {
            topic: topic.to_string(),
            source: Box::new(source),
        };
        let marks = self.load_progress_marks(topic).await?;
        if marks.is_empty() {
            return Ok(());
        }
        let reader = PartitionReader::new(kafka, topic).map_err(log_error)?;
        for (partition, mark) in marks {
            let Some(expected) = mark.last else { continue };
            if mark.next_offset <= 0 {
                continue;
            }
            let last = mark.next_offset - 1;
            let (low, high) = reader.watermarks(partition).await.map_err(log_error)?;
            let found = if high <= last {
                Some(format!(
                    "it ends at offset {high}, but records up to offset {last} were applied"
                ))
            } else if low > last {
                // Retention removed the record: the partition has moved on past it.
                None
            } else {
                let mut read = None;
                reader
                    .read_range(partition, last, last + 1, &mut |r| {
                        read = Some(LastRecord::of(&r))
                    })
                    .await
                    .map_err(log_error)?;
                match read {
                    Some(record) if record == expected => None,
                    Some(record) => Some(format!(
                        "offset {last} holds a record keyed {:?} at {:?} ms where the one \
                         applied was keyed {:?} at {:?} ms",
                        record.key, record.timestamp_ms, expected.key, expected.timestamp_ms
                    )),
                    None => Some(format!("offset {last} could not be read")),
                }
            };
            if let Some(found) = found {
                return Err(Error::TopicRecreated {
                    topic: topic.to_string(),
                    partition,
                    keyspace: self.keyspace().to_string(),
                    found,
                });
            }
        }
        Ok(())
    }
}
