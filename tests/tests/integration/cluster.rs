//! The cluster the stack started is the cluster the tests think it is.

use anyhow::{Context, Result};
use sessionlog_log::{Settings, topic};

/// `scripts/stack up --brokers N` records N in `SESSIONLOG_KAFKA_BROKERS`; the cluster's own
/// metadata must report exactly that many live brokers (CI runs with 3).
#[tokio::test(flavor = "multi_thread")]
async fn metadata_reports_every_broker_the_stack_started() -> Result<()> {
    let expected: usize = std::env::var("SESSIONLOG_KAFKA_BROKERS")
        .context("SESSIONLOG_KAFKA_BROKERS is not set: run the tests through scripts/test, or export .stack/stack.env")?
        .parse()?;
    let settings = Settings::load(None)?;
    let brokers = topic::live_brokers(&settings.kafka).await?;
    assert_eq!(brokers.len(), expected, "live brokers: {brokers:?}");
    Ok(())
}
