//! The dead-letter topic as operators read it, and replaying from it (`sessionlog dlq`).
//!
//! The projector sends a record it cannot project to `kafka.dead_letter_topic` with its key and
//! value unchanged and the headers named here: why ([`REASON`]) and where it was in the events
//! topic ([`ORIGIN_TOPIC`], [`ORIGIN_PARTITION`], [`ORIGIN_OFFSET`]). A dead letter is addressed
//! by its own place in the dead-letter topic, [`DeadLetterId`], written `PARTITION:OFFSET`.
//!
//! [`DeadLetters`] lists them and reads chosen ones; [`Replayer`] appends a dead letter's key
//! and value back to the events topic, marked with [`REPLAYED_FROM`], so that the projector
//! tries the event again once its cause is fixed. Appending twice puts two copies in the log:
//! the session fold ignores a second copy of an event it accepted (same seq and event id, a
//! duplicate), so the projection takes the event once.

use crate::group::{PartitionSpan, TopicSpan, topic_span};
use crate::{Error, KafkaSettings, PartitionReader, RawRecord, Result};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Header: why the projector could not project the record.
pub const REASON: &str = "sessionlog.reason";
/// Header: the topic the record was read from.
pub const ORIGIN_TOPIC: &str = "sessionlog.origin.topic";
/// Header: its partition there.
pub const ORIGIN_PARTITION: &str = "sessionlog.origin.partition";
/// Header: its offset there.
pub const ORIGIN_OFFSET: &str = "sessionlog.origin.offset";
/// Header of a replayed record in the events topic: the dead letter it was replayed from, as
/// `topic:partition:offset`, so that a replay can be told from the writer's append.
pub const REPLAYED_FROM: &str = "sessionlog.replayed.from";

/// Where a dead letter sits in the dead-letter topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeadLetterId {
    /// Its partition of the dead-letter topic.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
}

impl fmt::Display for DeadLetterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.partition, self.offset)
    }
}

impl FromStr for DeadLetterId {
    type Err = Error;

    /// `PARTITION:OFFSET`, both whole numbers from 0.
    fn from_str(text: &str) -> Result<Self> {
        let bad = || Error::BadDeadLetterId {
            text: text.to_string(),
        };
        let (partition, offset) = text.trim().split_once(':').ok_or_else(bad)?;
        let partition: i32 = partition.parse().map_err(|_| bad())?;
        let offset: i64 = offset.parse().map_err(|_| bad())?;
        if partition < 0 || offset < 0 {
            return Err(bad());
        }
        Ok(Self { partition, offset })
    }
}

/// Where a dead letter's record was in the events topic, as its headers say.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
}

/// One record of the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Where it sits in the dead-letter topic.
    pub id: DeadLetterId,
    /// Why the projector could not project it (`None`: no [`REASON`] header, so not a
    /// projector's dead letter).
    pub reason: Option<String>,
    /// Where it was in the events topic (`None`: its origin headers are missing or not numbers).
    pub origin: Option<Origin>,
    /// The record itself: the original key (the session id) and value, its timestamp (when it
    /// was dead-lettered) and headers.
    pub record: RawRecord,
}

impl DeadLetter {
    /// The dead letter a record of the dead-letter topic is.
    pub fn of(record: RawRecord) -> Self {
        let origin = (|| {
            Some(Origin {
                topic: record.header(ORIGIN_TOPIC)?.to_string(),
                partition: record.header(ORIGIN_PARTITION)?.parse().ok()?,
                offset: record.header(ORIGIN_OFFSET)?.parse().ok()?,
            })
        })();
        Self {
            id: DeadLetterId {
                partition: record.partition,
                offset: record.offset,
            },
            reason: record.header(REASON).map(str::to_string),
            origin,
            record,
        }
    }

    /// Why it cannot go back into `events_topic` whatever it holds: it does not come from the
    /// projector of that topic (no origin, or another topic's), or it has no key or no value
    /// (the projector would dead-letter it again). `None`: it can, if it decodes.
    pub fn replay_refusal(&self, events_topic: &str) -> Option<String> {
        match &self.origin {
            None => Some(format!(
                "no origin headers ({ORIGIN_TOPIC}, {ORIGIN_PARTITION}, {ORIGIN_OFFSET}): not a \
                 dead letter of sessionlog's projector"
            )),
            Some(origin) if origin.topic != events_topic => Some(format!(
                "it came from topic {}, not from this deployment's events topic {events_topic} \
                 (kafka.topic)",
                origin.topic
            )),
            Some(_) if self.record.key.is_none() => {
                Some("the record has no key: it belongs to no session".to_string())
            }
            Some(_) if self.record.payload.as_deref().is_none_or(<[u8]>::is_empty) => {
                Some("the record has no value: there is no event to replay".to_string())
            }
            Some(_) => None,
        }
    }
}

/// Dead letters read in order, and what the topic holds.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The dead-letter topic's partitions that were asked about, and what each holds.
    pub span: TopicSpan,
    /// The dead letters read: partition by partition, oldest first.
    pub letters: Vec<DeadLetter>,
}

/// A chosen dead letter: found, or why not.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// It is there.
    Found(Box<DeadLetter>),
    /// It is not: the topic has no such partition, or the partition no longer (retention) or
    /// not yet holds that offset. The text says which.
    Missing(String),
}

/// Reads the dead-letter topic of a deployment. Reads only, with manual assignment: no
/// consumer group is joined and nothing is committed.
pub struct DeadLetters {
    kafka: KafkaSettings,
    reader: PartitionReader,
}

impl DeadLetters {
    /// A reader of `kafka.dead_letter_topic`.
    pub fn new(kafka: &KafkaSettings) -> Result<Self> {
        Ok(Self {
            kafka: kafka.clone(),
            reader: PartitionReader::for_short_reads(kafka, &kafka.dead_letter_topic)?,
        })
    }

    /// The dead-letter topic's name.
    pub fn dead_letter_topic(&self) -> &str {
        &self.kafka.dead_letter_topic
    }

    /// The dead-letter topic's partitions and what each holds; [`Error::TopicMissing`] if the
    /// cluster does not have it.
    pub async fn span(&self) -> Result<TopicSpan> {
        let span = topic_span(&self.kafka, self.dead_letter_topic()).await?;
        if !span.exists() {
            return Err(Error::TopicMissing {
                topic: span.topic,
                setting: "kafka.dead_letter_topic",
            });
        }
        Ok(span)
    }

    /// At most `limit` dead letters of `partitions` (all when empty), oldest first, partition
    /// by partition. A partition the topic does not have is an error naming the ones it has.
    pub async fn list(&self, partitions: &[i32], limit: usize) -> Result<Listing> {
        let mut span = self.span().await?;
        if let Some(unknown) = partitions
            .iter()
            .find(|p| !span.partitions.iter().any(|s| s.partition == **p))
        {
            return Err(Error::TopicMismatch {
                topic: span.topic,
                problem: format!(
                    "it has no partition {unknown} (its partitions are 0 to {})",
                    span.partitions.len().saturating_sub(1)
                ),
            });
        }
        if !partitions.is_empty() {
            span.partitions
                .retain(|s| partitions.contains(&s.partition));
        }
        let mut letters = Vec::new();
        for held in &span.partitions {
            let room = limit.saturating_sub(letters.len());
            if room == 0 {
                break;
            }
            let room = i64::try_from(room).unwrap_or(i64::MAX);
            let until = held.end.min(held.start.saturating_add(room));
            self.reader
                .read_range(held.partition, held.start, until, &mut |record| {
                    letters.push(DeadLetter::of(record));
                })
                .await?;
        }
        Ok(Listing { span, letters })
    }

    /// The dead letters at `ids`, each found or missing, in ascending order and once each.
    pub async fn read(&self, ids: &[DeadLetterId]) -> Result<Vec<(DeadLetterId, Lookup)>> {
        let span = self.span().await?;
        let mut wanted: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for id in ids {
            wanted.entry(id.partition).or_default().push(id.offset);
        }
        let mut found: BTreeMap<DeadLetterId, DeadLetter> = BTreeMap::new();
        let mut lookups = Vec::new();
        for (partition, mut offsets) in wanted {
            offsets.sort_unstable();
            offsets.dedup();
            let Some(held) = span.partitions.iter().find(|s| s.partition == partition) else {
                let missing = format!(
                    "the dead-letter topic {} has no partition {partition} (its partitions are \
                     0 to {})",
                    span.topic,
                    span.partitions.len().saturating_sub(1)
                );
                lookups.extend(offsets.into_iter().map(|offset| {
                    (
                        DeadLetterId { partition, offset },
                        Lookup::Missing(missing.clone()),
                    )
                }));
                continue;
            };
            let (inside, outside): (Vec<i64>, Vec<i64>) = offsets
                .iter()
                .partition(|o| (held.start..held.end).contains(*o));
            self.reader
                .read_offsets(partition, &inside, &mut |record| {
                    let letter = DeadLetter::of(record);
                    found.insert(letter.id, letter);
                })
                .await?;
            for offset in inside.into_iter().chain(outside) {
                let id = DeadLetterId { partition, offset };
                let lookup = match found.remove(&id) {
                    Some(letter) => Lookup::Found(Box::new(letter)),
                    None => Lookup::Missing(missing(id, held, &span.topic)),
                };
                lookups.push((id, lookup));
            }
        }
        lookups.sort_by_key(|(id, _)| *id);
        Ok(lookups)
    }
}

/// Why there is no dead letter at `id`, in a partition that holds `held`.
fn missing(id: DeadLetterId, held: &PartitionSpan, topic: &str) -> String {
    let holds = if held.records() == 0 {
        format!("partition {} of {topic} holds none now", held.partition)
    } else {
        format!(
            "partition {} of {topic} holds offsets {} to {}",
            held.partition,
            held.start,
            held.end - 1
        )
    };
    if id.offset < held.start {
        format!(
            "no dead letter at {id} any more: retention (retention.dead_letter_retention_ms) \
             removed it; {holds}"
        )
    } else {
        format!("no dead letter at {id}: {holds}")
    }
}

/// Where a replayed record landed in the events topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Appended {
    /// Its partition (the key's, as for every append).
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// Appends dead letters' records back to the events topic.
pub struct Replayer {
    producer: FutureProducer,
    topic: String,
    dead_letter_topic: String,
}

impl Replayer {
    /// A producer for `kafka.topic`, configured as every producer of the log is (durable,
    /// partitioning by key like Kafka's own clients).
    pub fn new(kafka: &KafkaSettings) -> Result<Self> {
        Ok(Self {
            producer: kafka
                .producer_config()
                .create()
                .map_err(Error::kafka("create the replay producer"))?,
            topic: kafka.topic.clone(),
            dead_letter_topic: kafka.dead_letter_topic.clone(),
        })
    }

    /// Appends `letter`'s key and value, unchanged, to the events topic, with a
    /// [`REPLAYED_FROM`] header; returns where it landed once the brokers acknowledged it.
    /// The key puts it on its session's partition, after what the session has there.
    pub async fn append(&self, letter: &DeadLetter) -> Result<Appended> {
        let from = format!("{}:{}", self.dead_letter_topic, letter.id);
        let headers = OwnedHeaders::new().insert(Header {
            key: REPLAYED_FROM,
            value: Some(from.as_str()),
        });
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.topic).headers(headers);
        if let Some(key) = letter.record.key.as_deref() {
            record = record.key(key);
        }
        if let Some(payload) = letter.record.payload.as_deref() {
            record = record.payload(payload);
        }
        let delivered = self
            .producer
            .send(record, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| Error::kafka("append a replayed dead letter")(e))?;
        Ok(Appended {
            partition: delivered.partition,
            offset: delivered.offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(headers: &[(&str, &str)], key: Option<&str>, payload: Option<&[u8]>) -> RawRecord {
        RawRecord {
            partition: 1,
            offset: 7,
            key: key.map(|k| k.as_bytes().to_vec()),
            payload: payload.map(<[u8]>::to_vec),
            timestamp_ms: Some(1_700_000_000_000),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    const PROJECTOR_HEADERS: [(&str, &str); 4] = [
        (REASON, "unknown schema id 9"),
        (ORIGIN_TOPIC, "events"),
        (ORIGIN_PARTITION, "3"),
        (ORIGIN_OFFSET, "41"),
    ];

    #[test]
    fn an_address_is_partition_colon_offset() {
        let id: DeadLetterId = "2:17".parse().expect("valid");
        assert_eq!(
            id,
            DeadLetterId {
                partition: 2,
                offset: 17
            }
        );
        assert_eq!(id.to_string(), "2:17");
        for bad in [
            "",
            "2",
            "2:",
            ":17",
            "a:1",
            "1:b",
            "-1:0",
            "0:-3",
            "1:2:3",
            "99999999999:0",
        ] {
            let refused = bad.parse::<DeadLetterId>();
            assert!(
                matches!(refused, Err(Error::BadDeadLetterId { .. })),
                "{bad:?}: {refused:?}"
            );
        }
        let message = "x".parse::<DeadLetterId>().err().map(|e| e.to_string());
        assert!(
            message.is_some_and(|m| m.contains("PARTITION:OFFSET") && m.contains("dlq list")),
            "the error says what an address looks like"
        );
    }

    #[test]
    fn a_dead_letter_reads_its_reason_and_origin_from_the_headers() {
        let letter = DeadLetter::of(record(&PROJECTOR_HEADERS, Some("k"), Some(b"\0v")));
        assert_eq!(
            letter.id,
            DeadLetterId {
                partition: 1,
                offset: 7
            }
        );
        assert_eq!(letter.reason.as_deref(), Some("unknown schema id 9"));
        assert_eq!(
            letter.origin,
            Some(Origin {
                topic: "events".into(),
                partition: 3,
                offset: 41
            })
        );
        assert_eq!(letter.replay_refusal("events"), None);
        // Without the projector's headers (or with one that is not a number): no origin.
        let bare = DeadLetter::of(record(&[(ORIGIN_OFFSET, "x")], Some("k"), Some(b"v")));
        assert_eq!((bare.reason, bare.origin), (None, None));
    }

    #[test]
    fn replay_is_refused_for_another_topic_no_origin_no_key_or_no_value() {
        let refusal = |headers: &[(&str, &str)], key, payload| {
            DeadLetter::of(record(headers, key, payload)).replay_refusal("events")
        };
        let other = refusal(&PROJECTOR_HEADERS, Some("k"), Some(b"v"));
        assert_eq!(other, None);
        let elsewhere = DeadLetter::of(record(&PROJECTOR_HEADERS, Some("k"), Some(b"v")))
            .replay_refusal("other-events");
        assert!(elsewhere.is_some_and(|r| r.contains("came from topic events")));
        assert!(refusal(&[], Some("k"), Some(b"v")).is_some_and(|r| r.contains("no origin")));
        assert!(
            refusal(&PROJECTOR_HEADERS, None, Some(b"v")).is_some_and(|r| r.contains("no key"))
        );
        assert!(
            refusal(&PROJECTOR_HEADERS, Some("k"), None).is_some_and(|r| r.contains("no value"))
        );
        assert!(
            refusal(&PROJECTOR_HEADERS, Some("k"), Some(b""))
                .is_some_and(|r| r.contains("no value"))
        );
    }
}
