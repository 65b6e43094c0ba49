//! Wake records: "this session needs a harness", in the wake topic beside the session-events
//! topic (`<kafka.topic>-wake`, [`crate::KafkaSettings::wake_topic`]).
//!
//! The wake component (`sessionlog wake`) writes one when a session's writer lease lapsed while
//! the session could go on, when an approval was decided or an operator recorded a result,
//! when a pause's `until` passed, or when steering reached a session no live writer holds.
//! Workers (the library's worker loop, `GET /v1/work`) read them and resume the session.
//!
//! A wake is a hint, never a permission: the worker's claim goes through the fold, which
//! decides who runs the session. A wake names the session's epoch when it was caused; a worker
//! finding a later epoch knows someone else took the session ("already taken"), so a duplicate
//! or replayed wake is harmless. Keyed by session id and partitioned as its events are, a
//! session's wakes stay in order.
//!
//! The value is JSON with a `version` member, like a lease: operational, not history.

use crate::{Error, KafkaSettings, Result};
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use sessionlog_schemas::{Epoch, Micros, SessionId};

/// The version of the wake record's JSON this build writes and reads.
pub const WAKE_VERSION: u32 = 1;

/// Why a session needs a harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeReason {
    /// Its writer's lease lapsed while the session was neither ended, paused nor waiting for a
    /// person: the harness died.
    LeaseExpired,
    /// An approval it waited for was decided.
    ApprovalDecided,
    /// An operator recorded the result of a call it was stopped on.
    OperatorResult,
    /// A pause with an `until` time ran out.
    PauseElapsed,
    /// A steering message arrived while no live writer held it.
    Steering,
    /// An operator lifted a pause (`sessionlog unpause`), which fenced the harness.
    Unpaused,
}

impl WakeReason {
    /// Every reason, for metrics and listings.
    pub const ALL: [Self; 6] = [
        Self::LeaseExpired,
        Self::ApprovalDecided,
        Self::OperatorResult,
        Self::PauseElapsed,
        Self::Steering,
        Self::Unpaused,
    ];

    /// The reason's name, as the record and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeaseExpired => "lease_expired",
            Self::ApprovalDecided => "approval_decided",
            Self::OperatorResult => "operator_result",
            Self::PauseElapsed => "pause_elapsed",
            Self::Steering => "steering",
            Self::Unpaused => "unpaused",
        }
    }
}

/// One wake record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    /// The record's format ([`WAKE_VERSION`]).
    pub version: u32,
    /// The session to run.
    pub session_id: SessionId,
    /// The session's agent: workers serve agents.
    pub agent: String,
    /// The session's tenant: a worker whose credential is one tenant's reads only its wakes.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// Why.
    pub reason: WakeReason,
    /// The session's epoch when the cause happened: a worker finding a later one knows the
    /// session was taken since.
    pub epoch: Epoch,
    /// What caused it: the offset of the event in its partition of the events topic, for the
    /// reasons an event causes.
    pub cause_offset: Option<i64>,
    /// When the cause happened (the lease's expiry, the event's time, the pause's `until`), in
    /// microseconds since the Unix epoch: wake lag is measured from it.
    pub caused_at: Micros,
    /// When the wake component wrote the record.
    pub woken_at: Micros,
}

impl Wake {
    /// The record's value.
    pub fn encode(&self) -> Result<Vec<u8>> {
        crate::versioned::encode(self, "wake")
    }

    /// A record's value, or why it is not a wake this build reads.
    pub fn decode(value: &[u8]) -> std::result::Result<Self, String> {
        crate::versioned::decode(value, "wake", WAKE_VERSION)
    }
}

/// Writes wake records: keyed by session id on the session's partition number, so a
/// session's wakes stay in order. Needs no registry and no key-encryption key: a wake holds
/// no session content.
pub struct WakeWriter {
    producer: FutureProducer,
    topic: String,
    partitions: i32,
    timeout: std::time::Duration,
}

impl WakeWriter {
    /// A writer to `kafka`'s wake topic, which has `partitions` partitions (the events
    /// topic's), waiting at most `timeout` for each ack.
    pub fn new(
        kafka: &KafkaSettings,
        partitions: i32,
        timeout: std::time::Duration,
    ) -> Result<Self> {
        Ok(Self {
            producer: kafka
                .producer_config()
                .create()
                .map_err(Error::kafka("create the wake producer"))?,
            topic: kafka.wake_topic(),
            partitions,
            timeout,
        })
    }

    /// Writes `wake` and waits for the ack.
    pub async fn put(&self, wake: &Wake) -> Result<()> {
        let key = crate::partitioner::session_key(wake.session_id);
        let value = wake.encode()?;
        let record = FutureRecord::<str, [u8]>::to(&self.topic)
            .partition(crate::partitioner::partition_for(
                wake.session_id,
                self.partitions,
            ))
            .key(&key)
            .payload(&value);
        self.producer
            .send(record, self.timeout)
            .await
            .map(drop)
            .map_err(|(source, _)| {
                Error::kafka("write a wake (did `sessionlog init` create the wake topic?)")(source)
            })
    }
}

/// The wake records of one agent (of one tenant, or of every tenant), as a worker group reads
/// them: a consumer in the group [`worker_group`] (so an agent's workers share its wakes, each
/// record going to one of them), which skips the records of other agents and tenants. A tenant's
/// workers have a group of their own, so another tenant's workers never consume their wakes.
///
/// Offsets are committed in the background once a record was handed out ([`Self::next`]): a
/// worker that dies after taking a wake leaves no harness and no live lease behind, and the
/// wake component wakes the session again after its re-wake interval.
pub struct WakeFeed {
    consumer: StreamConsumer,
    agent: String,
    tenant: Option<String>,
}

impl WakeFeed {
    /// Joins the worker group of `agent` (of `tenant`'s sessions only, when given) on
    /// `kafka`'s wake topic.
    pub fn join(kafka: &KafkaSettings, agent: &str, tenant: Option<&str>) -> Result<Self> {
        let topic = kafka.wake_topic();
        let consumer: StreamConsumer = kafka
            .client_config()
            .set("group.id", worker_group(kafka, agent, tenant))
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("auto.commit.interval.ms", "1000")
            // A group new to the topic starts with the wakes still kept: the sessions a crash
            // left without a harness before any worker of the agent ran.
            .set("auto.offset.reset", "earliest")
            // A worker that dies hands its partitions on after 10 s, not librdkafka's 45.
            .set("session.timeout.ms", "10000")
            .create()
            .map_err(Error::kafka("create the wake consumer"))?;
        consumer
            .subscribe(&[&topic])
            .map_err(Error::kafka("subscribe to the wake topic"))?;
        Ok(Self {
            consumer,
            agent: agent.to_string(),
            tenant: tenant.map(str::to_string),
        })
    }

    /// The agent whose wakes this feed reads.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The next wake for the agent; the offset of every record read on the way (other agents'
    /// wakes, records this build does not read) is stored for the next commit. A transient
    /// error (a broker restarting, a leader moving) is waited out, as the client reconnects by
    /// itself; another is returned, and the feed may be read again after it.
    pub async fn next(&self) -> Result<Wake> {
        loop {
            let message = receive(&self.consumer).await?;
            let wake = message.payload().map(Wake::decode);
            if let Err(e) = self.consumer.store_offset_from_message(&message) {
                tracing::warn!(error = %e, "storing a wake offset failed; it may be read again");
            }
            match wake {
                Some(Ok(wake))
                    if wake.agent == self.agent
                        && self.tenant.as_ref().is_none_or(|t| *t == wake.tenant) =>
                {
                    return Ok(wake);
                }
                Some(Ok(_)) | None => {}
                Some(Err(why)) => tracing::warn!(%why, "wake record skipped"),
            }
        }
    }
}

/// Every wake written to the wake topic from a point in time on, read by one consumer assigned
/// every partition, in no group and committing nothing: what a service that hands wakes to the
/// workers of many agents and tenants reads once for all of them (the recovery service's
/// `GET /v1/work`), instead of a consumer (a client, its threads, a connection per broker)
/// per agent. Each instance reading it sees every wake.
pub struct WakeStream {
    consumer: std::sync::Arc<StreamConsumer>,
}

impl WakeStream {
    /// Reads `kafka`'s wake topic from the first record written at or after `since` (in
    /// milliseconds since the Unix epoch) in each partition, or from its end.
    pub async fn open(kafka: &KafkaSettings, since_ms: i64) -> Result<Self> {
        use rdkafka::{Offset, TopicPartitionList};
        let topic = kafka.wake_topic();
        let partitions = crate::topic::partition_count(kafka, &topic).await?;
        let consumer: StreamConsumer = kafka
            .client_config()
            // assign() needs a group id, though nothing is ever committed.
            .set("group.id", format!("sessionlog-work-{}", kafka.topic))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "latest")
            .create()
            .map_err(Error::kafka("create the wake stream's consumer"))?;
        let consumer = std::sync::Arc::new(consumer);
        let mut wanted = TopicPartitionList::new();
        for partition in 0..partitions {
            wanted
                .add_partition_offset(&topic, partition, Offset::Offset(since_ms))
                .map_err(Error::kafka("build the wake stream's time query"))?;
        }
        // A round trip, which rdkafka offers only as a blocking call.
        let asking = std::sync::Arc::clone(&consumer);
        let starts = tokio::task::spawn_blocking(move || {
            asking.offsets_for_times(wanted, std::time::Duration::from_secs(10))
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?
        .map_err(Error::kafka("find where the wake stream starts"))?;
        consumer
            .assign(&starts)
            .map_err(Error::kafka("assign the wake topic's partitions"))?;
        Ok(Self { consumer })
    }

    /// The next wake. Transient errors (a broker restarting, a leader moving) are waited out,
    /// as the client reconnects by itself; a record this build does not read is skipped.
    pub async fn next(&self) -> Result<Wake> {
        loop {
            let message = receive(&self.consumer).await?;
            match message.payload().map(Wake::decode) {
                Some(Ok(wake)) => return Ok(wake),
                Some(Err(why)) => tracing::warn!(%why, "wake record skipped"),
                None => {}
            }
        }
    }
}

/// The next record `consumer` reads from the wake topic. A transient error (a broker
/// restarting, a leader moving) is waited out, as the client reconnects by itself; another is
/// returned, and the consumer may be read again after it.
async fn receive(consumer: &StreamConsumer) -> Result<rdkafka::message::BorrowedMessage<'_>> {
    loop {
        match consumer.recv().await {
            Ok(message) => return Ok(message),
            Err(e) if crate::reader::is_transient(&e) => {
                tracing::debug!(error = %e, "reading wakes: transient error");
            }
            Err(e) => return Err(Error::kafka("read the wake topic")(e)),
        }
    }
}

/// The longest consumer group name [`worker_group`] makes, in bytes: what Kafka allows a
/// topic's name, so every tool that lists groups shows it whole.
pub const MAX_GROUP_BYTES: usize = 249;

/// The consumer group of `agent`'s workers on `kafka`'s wake topic:
/// `sessionlog-worker-<topic>:<agent>` for workers of every tenant, with `@<tenant>` for one
/// tenant's. Kafka's topic names have no `:`, and the names are percent-encoded (all but
/// letters, digits, `-`, `_` and `.`), so an `@` or a `%` in a name cannot make two agents or
/// two tenants share a group. A name longer than [`MAX_GROUP_BYTES`] keeps its start and ends
/// with a hash of the whole.
pub fn worker_group(kafka: &KafkaSettings, agent: &str, tenant: Option<&str>) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    use sha2::{Digest, Sha256};
    const SPELLED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');
    let mut group = format!(
        "sessionlog-worker-{}:{}",
        kafka.topic,
        utf8_percent_encode(agent, SPELLED)
    );
    if let Some(tenant) = tenant {
        group.push('@');
        group.extend(utf8_percent_encode(tenant, SPELLED));
    }
    if group.len() <= MAX_GROUP_BYTES {
        return group;
    }
    // `~` is encoded in names, so a shortened name is no whole one. The encoded name is ASCII:
    // any byte is a char boundary.
    let hash = Sha256::digest(group.as_bytes());
    let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
    group.truncate(MAX_GROUP_BYTES - hex.len() - 1);
    group.push('~');
    group.push_str(&hex);
    group
}

fn default_tenant() -> String {
    sessionlog_schemas::DEFAULT_TENANT.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake() -> Wake {
        Wake {
            version: WAKE_VERSION,
            session_id: SessionId::new(),
            agent: "triage".into(),
            tenant: "acme".into(),
            reason: WakeReason::ApprovalDecided,
            epoch: 3,
            cause_offset: Some(42),
            caused_at: 1,
            woken_at: 2,
        }
    }

    #[test]
    fn a_wake_round_trips_and_names_its_reason_in_snake_case() {
        let wake = wake();
        let bytes = wake.encode().expect("a wake encodes");
        assert_eq!(Wake::decode(&bytes), Ok(wake));
        let json: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(json["reason"], "approval_decided");
        for reason in WakeReason::ALL {
            let spelled = serde_json::to_value(reason).expect("json");
            assert_eq!(spelled, reason.as_str());
        }
    }

    #[test]
    fn names_that_would_spell_the_same_group_get_different_groups() {
        let kafka = KafkaSettings {
            topic: "events".into(),
            ..KafkaSettings::default()
        };
        let group = |agent: &str, tenant: Option<&str>| worker_group(&kafka, agent, tenant);
        // An `@` in a name, a `-` across the topic and the agent, a `%` that looks encoded.
        let pairs = [
            (group("a@b", None), group("a", Some("b"))),
            (group("a@b", Some("c")), group("a", Some("b@c"))),
            (group("a%40b", None), group("a@b", None)),
        ];
        for (one, other) in &pairs {
            assert_ne!(one, other);
        }
        let other_topic = KafkaSettings {
            topic: "events-x".into(),
            ..KafkaSettings::default()
        };
        assert_ne!(
            worker_group(&other_topic, "y", None),
            worker_group(&kafka, "x-y", None)
        );
        // Readable for the usual names, and within what Kafka's tools show whole.
        assert_eq!(group("triage", None), "sessionlog-worker-events:triage");
        assert_eq!(
            group("triage", Some("acme")),
            "sessionlog-worker-events:triage@acme"
        );
        let long = group(&"é".repeat(300), Some("t"));
        assert!(long.len() <= MAX_GROUP_BYTES, "{} bytes", long.len());
        assert_ne!(long, group(&"é".repeat(301), Some("t")));
    }

    #[test]
    fn a_record_of_another_version_or_shape_is_not_a_wake() {
        let mut newer = serde_json::to_value(wake()).expect("json");
        newer["version"] = 2.into();
        let error = Wake::decode(newer.to_string().as_bytes()).expect_err("newer");
        assert!(error.contains("version 2"), "{error}");
        assert!(Wake::decode(b"{}").is_err());
        assert!(Wake::decode(b"not json").is_err());
    }
}
