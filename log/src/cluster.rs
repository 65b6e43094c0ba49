//! What an operator asks of the Kafka cluster itself (`sessionlog doctor`): whether each
//! bootstrap address and each broker answers, which protocol versions each broker speaks, and
//! how far this host's clock is from each broker's.
//!
//! The Kafka protocol does not carry a broker's release: its ApiVersions answer lists the
//! requests it serves and their version ranges, and librdkafka keeps nothing else (the feature
//! levels Kafka 3.x added to that answer are skipped). That list is what is reported, as
//! librdkafka logs it while connecting.

use crate::{Error, KafkaSettings, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Timestamp;
use rdkafka::producer::{BaseProducer, FutureProducer, FutureRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A broker as the cluster's metadata names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokerAddress {
    /// The broker's id.
    pub id: i32,
    /// The host it advertises.
    pub host: String,
    /// The port it advertises.
    pub port: i32,
}

impl std::fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One request type a broker serves and the versions of it it accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApiVersionRange {
    /// The request's name, as librdkafka calls it (`Produce`, `Fetch`, ...).
    pub api: String,
    /// Its API key.
    pub key: i16,
    /// The oldest version accepted.
    pub min: i16,
    /// The newest version accepted.
    pub max: i16,
}

/// How one bootstrap address answered a metadata request on its own.
#[derive(Debug)]
pub struct BootstrapAnswer {
    /// The address, as `kafka.bootstrap` lists it.
    pub address: String,
    /// The brokers it named, or why it did not answer.
    pub answer: Result<Vec<BrokerAddress>>,
}

/// How one broker answered a request sent to it at the address it advertises.
#[derive(Debug)]
pub struct BrokerAnswer {
    /// The broker.
    pub broker: BrokerAddress,
    /// `Ok` when it answered (a DescribeConfigs of itself).
    pub answer: Result<()>,
    /// The requests it serves, from its ApiVersions answer (empty when it was not reached).
    pub api_versions: Vec<ApiVersionRange>,
}

/// The cluster as the configured bootstrap servers see it.
#[derive(Debug)]
pub struct ClusterProbe {
    /// Each `kafka.bootstrap` address, asked on its own.
    pub bootstrap: Vec<BootstrapAnswer>,
    /// The cluster's id, when the metadata carried it.
    pub cluster_id: Option<String>,
    /// Every broker the metadata names, each asked directly; an error when no bootstrap
    /// address gave the metadata.
    pub brokers: Result<Vec<BrokerAnswer>>,
}

/// Asks each bootstrap address, then each broker the cluster names, within `timeout` each.
pub async fn probe_cluster(kafka: &KafkaSettings, timeout: Duration) -> ClusterProbe {
    let addresses: Vec<String> = kafka
        .bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    let mut asked = Vec::with_capacity(addresses.len());
    for address in addresses {
        let mut single = kafka.clone();
        single.bootstrap = address.clone();
        asked.push(tokio::task::spawn_blocking(move || BootstrapAnswer {
            answer: metadata_brokers(&single, timeout),
            address,
        }));
    }
    let mut bootstrap = Vec::with_capacity(asked.len());
    for task in asked {
        bootstrap.push(task.await.unwrap_or_else(|e| BootstrapAnswer {
            address: String::new(),
            answer: Err(Error::Task(e.to_string())),
        }));
    }
    let (cluster_id, brokers) = match probe_brokers(kafka, timeout).await {
        Ok((id, brokers)) => (id, Ok(brokers)),
        Err(e) => (None, Err(e)),
    };
    ClusterProbe {
        bootstrap,
        cluster_id,
        brokers,
    }
}

/// The brokers a metadata request through `kafka.bootstrap` names.
fn metadata_brokers(kafka: &KafkaSettings, timeout: Duration) -> Result<Vec<BrokerAddress>> {
    let consumer: BaseConsumer = kafka
        .client_config()
        .set("socket.connection.setup.timeout.ms", millis(timeout))
        .create()
        .map_err(Error::kafka("create metadata client"))?;
    let metadata = consumer
        .fetch_metadata(None, timeout)
        .map_err(Error::kafka("fetch metadata"))?;
    Ok(brokers_of(&metadata))
}

/// The brokers a metadata answer names.
fn brokers_of(metadata: &rdkafka::metadata::Metadata) -> Vec<BrokerAddress> {
    metadata
        .brokers()
        .iter()
        .map(|b| BrokerAddress {
            id: b.id(),
            host: b.host().to_string(),
            port: b.port(),
        })
        .collect()
}

/// The cluster id and every broker, each sent a DescribeConfigs of itself: librdkafka sends
/// a broker's configuration request to that broker, over a connection of its own, so an
/// answer proves the broker is reachable at the address it advertises. The brokers' ApiVersions
/// answers come from a client that connects to every broker (`enable.sparse.connections=false`)
/// and logs them (`debug=feature`); its log lines are delivered as it is polled.
async fn probe_brokers(
    kafka: &KafkaSettings,
    timeout: Duration,
) -> Result<(Option<String>, Vec<BrokerAnswer>)> {
    let log = ApiVersionLog::default();
    let mut config = kafka.client_config();
    config
        .set("debug", "feature")
        .set("log.thread.name", "false")
        .set("enable.sparse.connections", "false")
        .set("socket.connection.setup.timeout.ms", millis(timeout))
        .set_log_level(RDKafkaLogLevel::Debug);
    let listener: BaseProducer<ApiVersionLog> = config
        .create_with_context(log.clone())
        .map_err(Error::kafka("create metadata client"))?;
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config()
        .create()
        .map_err(Error::kafka("create admin client"))?;
    let heard = log.clone();
    let (cluster_id, brokers, listener) = tokio::task::spawn_blocking(move || {
        let metadata = listener
            .client()
            .fetch_metadata(None, timeout)
            .map_err(Error::kafka("fetch metadata"))?;
        let brokers = brokers_of(&metadata);
        let cluster_id = listener.client().fetch_cluster_id(timeout);
        // Serve the log lines until every broker's ApiVersions answer is in, or the time is up
        // (a broker that cannot be reached never sends one).
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !heard.heard_all(&brokers) {
            listener.poll(Duration::from_millis(50));
        }
        Ok::<_, Error>((cluster_id, brokers, listener))
    })
    .await
    .unwrap_or_else(|e| Err(Error::Task(e.to_string())))?;
    drop(listener);
    let options = AdminOptions::new().request_timeout(Some(timeout));
    // Polled together, so every broker is asked at once.
    let answers = futures::future::join_all(brokers.iter().map(|broker| {
        let (admin, options) = (&admin, &options);
        async move {
            let answer = admin
                .describe_configs(&[ResourceSpecifier::Broker(broker.id)], options)
                .await
                .map_err(Error::kafka("describe a broker"))
                .and_then(|results| match results.into_iter().next() {
                    Some(Ok(_)) => Ok(()),
                    Some(Err(code)) => Err(Error::kafka("describe a broker")(
                        rdkafka::error::KafkaError::AdminOp(code),
                    )),
                    None => Err(Error::Task("the broker answered nothing".into())),
                });
            (broker.clone(), answer)
        }
    }))
    .await;
    let ranges = log.ranges();
    Ok((
        cluster_id,
        answers
            .into_iter()
            .map(|(broker, answer)| BrokerAnswer {
                api_versions: ranges.get(&broker.id).cloned().unwrap_or_default(),
                broker,
                answer,
            })
            .collect(),
    ))
}

/// Collects the ApiVersions lines librdkafka logs (`debug=feature`) for each learned broker.
#[derive(Clone, Default)]
struct ApiVersionLog {
    by_broker: Arc<Mutex<BTreeMap<i32, BTreeMap<i16, ApiVersionRange>>>>,
}

impl ApiVersionLog {
    /// Whether every one of `brokers` has logged its list (its last line comes with it: the
    /// list is logged in one go as the answer is parsed).
    fn heard_all(&self, brokers: &[BrokerAddress]) -> bool {
        let heard = self
            .by_broker
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        brokers.iter().all(|b| heard.contains_key(&b.id))
    }

    fn ranges(&self) -> BTreeMap<i32, Vec<ApiVersionRange>> {
        self.by_broker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, apis)| (*id, apis.values().cloned().collect()))
            .collect()
    }
}

/// It sends nothing: a producer only because polling one serves its log lines.
impl ProducerContext for ApiVersionLog {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

impl ClientContext for ApiVersionLog {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac != "APIVERSION" {
            return;
        }
        if let Some((broker, range)) = parse_api_version_line(log_message) {
            self.by_broker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(broker)
                .or_default()
                .insert(range.key, range);
        }
    }
}

/// One line of librdkafka's "Broker API support" list: `<broker name>:   ApiKey <Name> (<key>)
/// Versions <min>..<max>`, where the broker's name ends in `/<id>` once it is a learned broker
/// (bootstrap connections end in `/bootstrap` and are skipped).
fn parse_api_version_line(line: &str) -> Option<(i32, ApiVersionRange)> {
    let (name, rest) = line.split_once(": ")?;
    let broker: i32 = name.rsplit('/').next()?.parse().ok()?;
    let rest = rest.trim().strip_prefix("ApiKey ")?;
    let (api, rest) = rest.split_once(" (")?;
    let (key, rest) = rest.split_once(')')?;
    let (min, max) = rest.trim().strip_prefix("Versions ")?.split_once("..")?;
    Some((
        broker,
        ApiVersionRange {
            api: api.to_string(),
            key: key.parse().ok()?,
            min: min.trim().parse().ok()?,
            max: max.trim().parse().ok()?,
        },
    ))
}

/// One broker's clock against this host's: what the broker stamped on a record it appended
/// minus the midpoint of this host's clock around the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokerClock {
    /// The broker.
    pub broker: i32,
    /// The partition it leads that the record went to.
    pub partition: i32,
    /// The broker's clock minus this host's, in milliseconds (positive: the broker is ahead).
    pub offset_ms: i64,
    /// How far off `offset_ms` may be: half the round trip of the best sample, plus the 1 ms
    /// of the broker's timestamp resolution.
    pub uncertainty_ms: i64,
}

/// The clocks of the brokers that lead a partition of the probe topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClockProbe {
    /// The topic the records went to.
    pub topic: String,
    /// Each broker measured.
    pub clocks: Vec<BrokerClock>,
}

/// Records sent to each partition of the probe topic; the one with the shortest round trip
/// gives the measurement (as NTP picks its best sample).
const CLOCK_SAMPLES: usize = 5;

/// Measures each broker's clock against this host's by appending small records to `topic`,
/// created (if missing) with `message.timestamp.type=LogAppendTime`, so the broker stamps each
/// record with its own clock when it appends it and returns the stamp in its answer; one
/// partition per broker, one replica, an hour's retention. Needs Create (once) and Write on
/// `topic`.
pub async fn broker_clocks(
    kafka: &KafkaSettings,
    topic: &str,
    timeout: Duration,
) -> Result<ClockProbe> {
    let brokers = crate::topic::live_brokers(kafka).await?;
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config()
        .create()
        .map_err(Error::kafka("create admin client"))?;
    let hour = Duration::from_secs(3600).as_millis().to_string();
    let partitions = i32::try_from(brokers.len().max(1)).unwrap_or(i32::MAX);
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1))
        .set("message.timestamp.type", "LogAppendTime")
        .set("cleanup.policy", "delete")
        .set("retention.ms", &hour)
        .set("segment.ms", &hour);
    let created = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(timeout)),
        )
        .await
        .map_err(Error::kafka("create the clock probe topic"))?;
    for result in created {
        if let Err((name, code)) = result
            && code != RDKafkaErrorCode::TopicAlreadyExists
        {
            return Err(Error::TopicMismatch {
                topic: name,
                problem: format!(
                    "could not be created for the clock probe: {code} (the principal needs \
                     Create and Write on it)"
                ),
            });
        }
    }
    crate::topic::wait_for_leaders(kafka, topic, timeout).await?;
    let leaders = partition_leaders(kafka, topic, timeout).await?;
    let producer: FutureProducer = kafka
        .client_config()
        .set("acks", "1")
        .set("enable.idempotence", "false")
        .set("linger.ms", "0")
        .set("message.timeout.ms", millis(timeout))
        .create()
        .map_err(Error::kafka("create the clock probe producer"))?;
    let mut best: BTreeMap<i32, BrokerClock> = BTreeMap::new();
    for (partition, leader) in leaders {
        for _ in 0..CLOCK_SAMPLES {
            let before = now_micros();
            let delivery = producer
                .send(
                    FutureRecord::<[u8], [u8]>::to(topic)
                        .partition(partition)
                        .payload(b"sessionlog doctor clock probe"),
                    timeout,
                )
                .await
                .map_err(|(e, _)| Error::kafka("append a clock probe record")(e))?;
            let after = now_micros();
            let stamped = match delivery.timestamp {
                Timestamp::LogAppendTime(ms) => ms,
                other => {
                    return Err(Error::TopicMismatch {
                        topic: topic.to_string(),
                        problem: format!(
                            "stamps its records with {other:?}, not the broker's clock: set \
                             message.timestamp.type=LogAppendTime on it, or name another \
                             topic for the clock probe"
                        ),
                    });
                }
            };
            let clock = measure(leader, partition, before, after, stamped);
            let better = best
                .get(&leader)
                .is_none_or(|b| clock.uncertainty_ms < b.uncertainty_ms);
            if better {
                best.insert(leader, clock);
            }
        }
    }
    Ok(ClockProbe {
        topic: topic.to_string(),
        clocks: best.into_values().collect(),
    })
}

/// The offset of a broker's stamp (milliseconds) from the midpoint of this host's clock before
/// and after the request (microseconds), and its bound.
fn measure(
    broker: i32,
    partition: i32,
    before_us: i64,
    after_us: i64,
    stamped_ms: i64,
) -> BrokerClock {
    let midpoint_us = before_us + (after_us - before_us) / 2;
    let offset_us = stamped_ms.saturating_mul(1000) - midpoint_us;
    let half_trip_us = (after_us - before_us).max(0) / 2;
    BrokerClock {
        broker,
        partition,
        offset_ms: offset_us / 1000,
        uncertainty_ms: (half_trip_us + 999) / 1000 + 1,
    }
}

/// Each partition of `topic` and the broker leading it.
async fn partition_leaders(
    kafka: &KafkaSettings,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<(i32, i32)>> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka
            .client_config()
            .create()
            .map_err(Error::kafka("create metadata client"))?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), timeout)
            .map_err(Error::kafka("fetch metadata"))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| (p.id(), p.leader())))
            .filter(|(_, leader)| *leader >= 0)
            .collect())
    })
    .await
    .unwrap_or_else(|e| Err(Error::Task(e.to_string())))
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

fn millis(duration: Duration) -> String {
    duration.as_millis().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_lines_of_learned_brokers_are_read_and_bootstrap_ones_skipped() {
        let line = "127.0.0.1:9092/2:   ApiKey Produce (0) Versions 3..12";
        assert_eq!(
            parse_api_version_line(line),
            Some((
                2,
                ApiVersionRange {
                    api: "Produce".into(),
                    key: 0,
                    min: 3,
                    max: 12
                }
            ))
        );
        let tls = "sasl_ssl://broker-1.example:9093/1:   ApiKey DescribeConfigs (32) Versions 1..4";
        assert_eq!(
            parse_api_version_line(tls).map(|(b, r)| (b, r.key, r.max)),
            Some((1, 32, 4))
        );
        assert_eq!(
            parse_api_version_line("127.0.0.1:9092/bootstrap:   ApiKey Fetch (1) Versions 4..17"),
            None
        );
        assert_eq!(
            parse_api_version_line("127.0.0.1:9092/1: Broker API support:"),
            None
        );
    }

    #[test]
    fn a_clock_offset_is_taken_from_the_midpoint_and_bounded_by_half_the_trip() {
        // Sent at 1_000_000_000 ms, answered 4 ms later; the broker stamped 502 ms after.
        let clock = measure(1, 0, 1_000_000_000_000, 1_000_000_004_000, 1_000_000_502);
        assert_eq!(clock.offset_ms, 500);
        assert_eq!(clock.uncertainty_ms, 3);
        // A broker behind this host.
        let behind = measure(2, 1, 5_000_000_000, 5_000_001_000, 4_999_000);
        assert_eq!(behind.offset_ms, -1000);
        assert_eq!(behind.uncertainty_ms, 2);
    }
}
