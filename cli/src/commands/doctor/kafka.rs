//! `doctor`'s Kafka checks: each bootstrap address and broker (with the requests it serves),
//! the topics against `[retention]` and `[kafka]`, and this host's clock against each broker's.

use super::found::{Found, change, status_of};
use super::report::{ClockReport, Status};
use sessionlog_log::Resolution;
use sessionlog_log::SettingSource;
use sessionlog_log::cluster::{self, ApiVersionRange, BrokerClock};
use sessionlog_log::topic;
use std::collections::BTreeMap;
use std::time::Duration;

/// How the brokers' clocks are measured: the topic the probe appends to (default
/// `<kafka.topic>-doctor`) and the largest offset that passes.
pub struct Clock {
    /// `--clock-topic`.
    pub topic: Option<String>,
    /// `--max-clock-skew`.
    pub max_skew: Duration,
}

/// Asks each bootstrap address and broker, checks the topics, and measures the brokers' clocks.
pub async fn checks(resolution: &Resolution, timeout: Duration, clock: Option<&Clock>) -> Found {
    let settings = &resolution.settings;
    let kafka = &settings.kafka;
    let mut found = Found::default();
    let probe = cluster::probe_cluster(kafka, timeout).await;
    let versions: BTreeMap<String, String> = match &probe.brokers {
        Ok(brokers) => brokers
            .iter()
            .map(|b| (b.broker.to_string(), api_summary(&b.api_versions)))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    let mut reached = false;
    for answer in probe.bootstrap {
        let line = found.server("kafka", "bootstrap", &answer.address);
        line.version = versions.get(&answer.address).cloned();
        match answer.answer {
            Ok(_) => reached = true,
            Err(e) => {
                let e = anyhow::Error::new(e);
                found.server_failed(
                    "kafka",
                    &e,
                    format!(
                        "Kafka bootstrap address {} did not answer: {e}",
                        answer.address
                    ),
                    format!(
                        "start the broker there, or {}",
                        change(resolution, "kafka.bootstrap")
                    ),
                );
            }
        }
    }
    let brokers = match probe.brokers {
        Ok(brokers) => brokers,
        Err(e) => {
            if reached {
                let e = anyhow::Error::new(e);
                found.problem(
                    "kafka",
                    format!("the cluster's metadata could not be read: {e}"),
                    change(resolution, "kafka.bootstrap"),
                    status_of(&e),
                );
            }
            return found;
        }
    };
    let broker_ids: Vec<i32> = brokers.iter().map(|b| b.broker.id).collect();
    for answer in brokers {
        let id = answer.broker.id;
        let address = answer.broker.to_string();
        let line = found.server("kafka", format!("broker {id}"), &address);
        line.version = Some(api_summary(&answer.api_versions));
        line.api_versions = answer.api_versions;
        let Err(e) = answer.answer else { continue };
        let e = anyhow::Error::new(e);
        if status_of(&e) == Status::Unreachable {
            line.status = Status::Unreachable;
            found.problem(
                "kafka",
                format!("broker {id} advertises {address}, which did not answer from here: {e}"),
                format!(
                    "start broker {id}, or make its advertised.listeners name an address this \
                     host reaches (check DNS and the network to {address})"
                ),
                Status::Unreachable,
            );
        } else {
            // It answered, with a refusal: reachable, which is what is checked here.
            found.notes.push(format!(
                "kafka: broker {id} answered but refused to describe itself: {e} (reading a \
                 broker's configuration needs DescribeConfigs on the cluster)"
            ));
        }
    }
    match topic::check_topics(kafka, &settings.retention).await {
        Ok(checks) => {
            for check in &checks {
                for finding in &check.findings {
                    let mut fix = finding.fix.clone();
                    if let Some(key) = finding.setting
                        && let Some(value) = resolution.values.iter().find(|v| v.key == key)
                    {
                        fix.push_str(&match &value.source {
                            SettingSource::Default => format!(" ({key} has its default)"),
                            source => format!(" ({key} comes from {source})"),
                        });
                    }
                    found.problem("topic", finding.problem.clone(), fix, Status::Failed);
                }
            }
            found.topics = checks;
        }
        Err(e) => {
            let e = anyhow::Error::new(e);
            let status = status_of(&e);
            found.problem(
                "topic",
                format!("the topics could not be described: {e}"),
                "the principal needs Describe and DescribeConfigs on the topics".into(),
                status,
            );
        }
    }
    let Some(clock) = clock else {
        found.notes.push("clock: not measured (--no-clock)".into());
        return found;
    };
    let clock_topic = clock
        .topic
        .clone()
        .unwrap_or_else(|| format!("{}-doctor", kafka.topic));
    match cluster::broker_clocks(kafka, &clock_topic, timeout).await {
        Ok(probe) => {
            let max = i64::try_from(clock.max_skew.as_millis()).unwrap_or(i64::MAX);
            for clock in &probe.clocks {
                if let Some(problem) = skew_problem(clock, max) {
                    found.problem(
                        "clock",
                        problem,
                        "synchronise the clocks of this host and the brokers with NTP \
                         (`chronyc tracking` or `timedatectl timesync-status` shows where each \
                         stands); record timestamps, retention and --from-time follow them"
                            .into(),
                        Status::Failed,
                    );
                }
            }
            let measured: Vec<i32> = probe.clocks.iter().map(|c| c.broker).collect();
            let unmeasured: Vec<String> = broker_ids
                .iter()
                .copied()
                .filter(|id| !measured.contains(id))
                .map(|id| id.to_string())
                .collect();
            if !unmeasured.is_empty() {
                found.notes.push(format!(
                    "clock: broker(s) {} lead no partition of {}, so their clocks were not \
                     measured (add partitions to it: kafka-topics.sh --alter --partitions {})",
                    unmeasured.join(", "),
                    probe.topic,
                    broker_ids.len()
                ));
            }
            found.clock = Some(ClockReport {
                topic: probe.topic,
                max_skew_ms: u64::try_from(clock.max_skew.as_millis()).unwrap_or(u64::MAX),
                clocks: probe.clocks,
            });
        }
        Err(e) => found.notes.push(format!(
            "clock: not measured: {e} (--clock-topic names a topic with \
             message.timestamp.type=LogAppendTime this principal may write to; --no-clock skips it)"
        )),
    }
    found
}

/// A clock that is off by more than `max_ms` for certain: beyond it even at the near end of
/// the measurement's bound.
fn skew_problem(clock: &BrokerClock, max_ms: i64) -> Option<String> {
    let certain = clock.offset_ms.abs() - clock.uncertainty_ms;
    (certain > max_ms).then(|| {
        let side = if clock.offset_ms > 0 {
            "behind"
        } else {
            "ahead of"
        };
        format!(
            "this host's clock is {} ms (± {} ms) {side} broker {}'s, more than the {max_ms} ms \
             allowed (--max-clock-skew)",
            clock.offset_ms.abs(),
            clock.uncertainty_ms,
            clock.broker
        )
    })
}

/// A broker's ApiVersions answer in a line: how many requests, and the newest versions of the
/// ones every client uses.
fn api_summary(apis: &[ApiVersionRange]) -> String {
    if apis.is_empty() {
        return "unknown (no ApiVersions answer was seen)".into();
    }
    let newest = |name: &str| {
        apis.iter()
            .find(|a| a.api == name)
            .map(|a| format!(" {name} v{}", a.max))
            .unwrap_or_default()
    };
    format!(
        "Kafka protocol: {} APIs;{}{}{}",
        apis.len(),
        newest("Produce"),
        newest("Fetch"),
        newest("Metadata")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(offset_ms: i64, uncertainty_ms: i64) -> BrokerClock {
        BrokerClock {
            broker: 1,
            partition: 0,
            offset_ms,
            uncertainty_ms,
        }
    }

    #[test]
    fn only_a_skew_beyond_the_limit_for_certain_is_a_problem() {
        assert_eq!(skew_problem(&clock(900, 5), 1000), None);
        // 1,004 ms ± 5: it may be 999 ms.
        assert_eq!(skew_problem(&clock(1004, 5), 1000), None);
        let ahead = skew_problem(&clock(-1500, 3), 1000).unwrap_or_default();
        assert!(
            ahead.contains("1500 ms (± 3 ms) ahead of broker 1's"),
            "{ahead}"
        );
        let behind = skew_problem(&clock(2500, 3), 1000).unwrap_or_default();
        assert!(behind.contains("behind broker 1's"), "{behind}");
    }

    #[test]
    fn the_api_summary_names_the_requests_every_client_uses() {
        let api = |name: &str, key: i16, max: i16| ApiVersionRange {
            api: name.into(),
            key,
            min: 0,
            max,
        };
        assert_eq!(
            api_summary(&[
                api("Produce", 0, 12),
                api("Fetch", 1, 17),
                api("Metadata", 3, 13)
            ]),
            "Kafka protocol: 3 APIs; Produce v12 Fetch v17 Metadata v13"
        );
        assert!(api_summary(&[]).starts_with("unknown"));
    }
}
