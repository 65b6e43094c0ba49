//! One `PartitionReader` reused for many reads returns, every time, exactly the records of the
//! range asked for: none its consumer fetched ahead for an earlier read, none skipped.

use anyhow::Result;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use sessionlog_log::PartitionReader;
use sessionlog_testkit::TestStack;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_reader_reads_exactly_each_range_asked_for() -> Result<()> {
    let stack = TestStack::new("reader", 1).await?;
    let producer: FutureProducer = stack.settings.kafka.producer_config().create()?;
    let records = 3_000i64;
    let sends = (0..records).map(|i| {
        let payload = i.to_string();
        let producer = &producer;
        let topic = &stack.settings.kafka.topic;
        async move {
            producer
                .send(
                    FutureRecord::to(topic)
                        .partition(0)
                        .key("k")
                        .payload(&payload),
                    Timeout::After(Duration::from_secs(30)),
                )
                .await
                .map_err(|(e, _)| e)
        }
    });
    futures::future::try_join_all(sends).await?;

    let reader = PartitionReader::new(&stack.settings.kafka, &stack.settings.kafka.topic)?;
    // Short ranges at scattered offsets, forwards and backwards: after each, the consumer has
    // fetched far past the range (librdkafka prefetches), and the next read asks for another.
    let ranges = [
        (0, 5),
        (2_000, 2_003),
        (10, 12),
        (11, 15),
        (1_500, 1_501),
        (12, 40),
        (2_990, 3_000),
        (100, 101),
        (101, 102),
        (0, 1),
        (2_500, 2_510),
        (2_502, 2_504),
    ];
    for round in 0..5 {
        for (from, until) in ranges {
            let mut offsets = Vec::new();
            let next = reader
                .read_range(0, from, until, &mut |r| offsets.push(r.offset))
                .await?;
            assert_eq!(
                offsets,
                (from..until).collect::<Vec<_>>(),
                "round {round}: read of [{from}, {until})"
            );
            assert_eq!(next, until, "round {round}: next after [{from}, {until})");
        }
    }
    Ok(())
}
