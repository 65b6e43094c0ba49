//! The log contract (`sessionlog_producer::testing::contract`) kept by Kafka: the same suite
//! the producer's unit tests run over the in-memory topics, run here against the stack, so
//! the memory backend cannot drift from what the writers get in production.

use sessionlog_log::Settings;
use sessionlog_producer::EventLog;
use sessionlog_testkit::TestStack;

/// One topic for the whole suite: every contract test writes sessions of its own.
static STACK: tokio::sync::OnceCell<Settings> = tokio::sync::OnceCell::const_new();

/// A log over the suite's topic, made in the calling test's runtime (a log's tail and readers
/// live in the runtime that made them).
async fn kafka_log() -> EventLog {
    let settings = STACK
        .get_or_try_init(|| async {
            let mut settings = TestStack::new("logcontract", 3).await?.settings;
            // The contract is the topic's, under the sealing: events read back as written,
            // as the in-memory log (no keyring) reads them.
            settings.privacy.encrypt = false;
            anyhow::Ok(settings)
        })
        .await
        .expect("the test's topic, keyspace and schemas (is the stack up? scripts/stack up)");
    EventLog::from_settings(settings)
        .await
        .expect("a log over Kafka")
}

sessionlog_producer::log_contract_tests!(kafka_log());
