//! Producer benchmark: S sessions × E events of about 1 KiB with W concurrent writer tasks,
//! through `EventLog` + `SessionWriter`, against Kafka's own `ProducerPerformance` run in the
//! same program with the same record size, `acks=all`, idempotence, compression and linger.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo run --release -p sessionlog-benches --bin sessionlog-bench -- producer --sessions 1000 --events 300 --rounds 3
//! ```
//!
//! Each of `--rounds` runs both producers, alternating which goes first, and the bench prints
//! every round, the median ratio and its spread: one short run flatters whichever side's JVM
//! was cold, so a side should send at least 300,000 records. With `--rate R --duration S` the
//! load is an open loop instead (each session appends at its share of R events a second,
//! whatever the acks do; latency counts from when an append was due, so a slow ack delays the
//! clock, not the measurement), against ProducerPerformance throttled to the same rate.
//!
//! With `--encryption-rounds N` it measures what sealing costs instead: N rounds, each running
//! the same load with `[privacy] encrypt` off and on (alternating which goes first), printing
//! every round, the median ratio (sealed / plain) and its spread. With `--key-rounds N`, what
//! per-record keys cost: the same load sealed under the session's one key and under each
//! field's own key (`[privacy] per_record_keys`), the ratio per-record / per-session. With
//! `--confirm-rounds N`,
//! what confirmation costs: each append read back until the fold accepts it
//! (`SessionWriter::append_confirmed`, what every HTTP append does) against appends answered at
//! Kafka's ack.

use crate::{Latencies, peak_rss_bytes, print_table};
use anyhow::{Context, Result, bail};
use sessionlog_log::{Settings, topic};
use sessionlog_producer::{EventLog, SessionWriter};
use sessionlog_schemas::{Content, EventEncoder, SessionEvent};
use sessionlog_testkit::stack;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
#[command(about = "sessionlog producer vs Kafka's ProducerPerformance")]
pub struct Args {
    /// Sessions open at once.
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Events appended per session (after its start event).
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// Events a session sends together (`SessionWriter::append_batch`, as a harness appends a
    /// turn's events) before waiting for their acks; 1 waits for each event's ack. Every
    /// event's latency is its batch's, from when the batch was due.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=128))]
    batch: u16,
    /// Concurrent writer tasks; each drives sessions/writers sessions at once.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Size of one record value in bytes (both producers).
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    /// Partitions of each benchmark topic.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Rounds against ProducerPerformance, alternating which runs first.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Open loop: events a second over every session (each appends at its share), against
    /// ProducerPerformance throttled to the same rate; `--events` is then derived from
    /// `--duration`.
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds of open-loop load per side with `--rate`.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Compare sealed with plain over this many rounds instead of comparing with Kafka.
    #[arg(long, default_value_t = 0)]
    encryption_rounds: usize,
    /// Compare fields sealed each under its own key (per record, the default) with fields
    /// sealed under the session's one key (`[privacy] per_record_keys = false`, as before
    /// schema v8) over this many rounds, instead of comparing with Kafka.
    #[arg(long, default_value_t = 0)]
    key_rounds: usize,
    /// Compare confirmed appends (read back until the fold accepts them, as the ingest service
    /// and the library's intents do) with appends answered at Kafka's ack, over this many
    /// rounds, instead of comparing with Kafka.
    #[arg(long, default_value_t = 0)]
    confirm_rounds: usize,
}

/// One producer's figures.
struct Figures {
    records: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl Figures {
    fn throughput(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    let mut settings = Settings::load(None).context("loading settings")?;
    stack::isolate(&mut settings, "bench", "producer", args.partitions);
    topic::ensure_topics(&settings.kafka).await?;
    // Two ways of sealing the same load, alternated: plain against sealed, or each field
    // under its own key against the session's one key.
    if args.encryption_rounds > 0 || args.key_rounds > 0 {
        let (names, (a, b), rounds) = if args.encryption_rounds > 0 {
            let pair = crate::plain_and_sealed(&settings).await?;
            (["plain", "sealed"], pair, args.encryption_rounds)
        } else {
            let pair = crate::per_session_and_per_record(&settings).await?;
            (["per-session", "per-record"], pair, args.key_rounds)
        };
        let sides = [Side::acked(names[0], &a), Side::acked(names[1], &b)];
        let result = compare(sides, rounds, &args).await;
        topic::delete_topics(&settings.kafka).await?;
        return result;
    }
    crate::prepare_privacy(&mut settings).await?;
    if args.confirm_rounds > 0 {
        let sides = [
            Side::acked("acked", &settings),
            Side {
                confirm: true,
                ..Side::acked("confirmed", &settings)
            },
        ];
        let result = compare(sides, args.confirm_rounds, &args).await;
        topic::delete_topics(&settings.kafka).await?;
        return result;
    }
    let mut reference_run = settings.clone();
    stack::isolate(&mut reference_run, "bench", "kafka", args.partitions);
    let reference = reference_run.kafka;
    topic::ensure_topics(&reference).await?;
    let result = against_kafka(&settings, &reference.topic, &args).await;
    // The run's topics go: runs must not pile data up on the stack.
    topic::delete_topics(&settings.kafka).await?;
    topic::delete_topics(&reference).await?;
    result
}

/// Records a side should send before its figure means anything: ProducerPerformance's JVM is
/// still warming up through a shorter run (issue 17 measured 3.28× at 20,000 records and
/// 0.92–1.75× at 300,000–500,000).
const WARM_RECORDS: usize = 300_000;

/// `--rounds` of ours against ProducerPerformance, alternating which runs first; prints every
/// round, the median ratios and their spread.
async fn against_kafka(settings: &Settings, reference_topic: &str, args: &Args) -> Result<()> {
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let mut args = args.clone();
    // What run_ours opens (a whole number of sessions per writer task): the rate, the
    // reference's record count and the report all use it.
    let writers = args.writers.max(1);
    args.sessions = args.sessions.max(1).div_ceil(writers) * writers;
    let pace = match args.rate {
        Some(0) => bail!("--rate must be at least 1 event a second"),
        Some(rate) => {
            let sessions = args.sessions as u64;
            let total = rate
                .checked_mul(args.duration)
                .context("--rate × --duration overflows")?;
            args.events = usize::try_from(total.div_ceil(sessions))?;
            // Each session appends once every sessions/rate seconds.
            Some(Duration::from_secs_f64(sessions as f64 / rate as f64))
        }
        None => None,
    };
    let per_side = args.sessions.saturating_mul(args.events);
    if per_side < WARM_RECORDS {
        eprintln!(
            "warning: {per_side} records a side is under {WARM_RECORDS}: ProducerPerformance's JVM may not be warm"
        );
    }
    let (mut throughput, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for round in 1..=args.rounds {
        let ours_first = round % 2 == 1;
        let (ours, kafka) = if ours_first {
            eprintln!("round {round}: sessionlog, then kafka");
            let ours = run_ours(settings, &args, false, 1, pace).await?;
            let kafka = run_kafka(settings, reference_topic, &args, per_side, args.rate)?;
            (ours, kafka)
        } else {
            eprintln!("round {round}: kafka, then sessionlog");
            let kafka = run_kafka(settings, reference_topic, &args, per_side, args.rate)?;
            (run_ours(settings, &args, false, 1, pace).await?, kafka)
        };
        let ratio = |a: f64, b: f64| a / b.max(f64::EPSILON);
        throughput.push(ratio(ours.throughput(), kafka.throughput()));
        p50.push(ratio(ours.p50_ms, kafka.p50_ms));
        p99.push(ratio(ours.p99_ms, kafka.p99_ms));
        rows.push(vec![
            round.to_string(),
            if ours_first {
                "sessionlog, kafka"
            } else {
                "kafka, sessionlog"
            }
            .to_string(),
            ours.records.to_string(),
            format!("{:.0}", ours.throughput()),
            format!("{:.0}", kafka.throughput()),
            format!("{:.3}", ratio(ours.throughput(), kafka.throughput())),
            format!("{:.1} / {:.1}", ours.p50_ms, ours.p99_ms),
            format!("{:.1} / {:.1}", kafka.p50_ms, kafka.p99_ms),
            format!("{:.3}", ratio(ours.p99_ms, kafka.p99_ms)),
        ]);
    }
    let load = match args.rate {
        Some(rate) => format!(
            "open loop at {rate} events/s for {} s a side",
            args.duration
        ),
        None => "as fast as acks come back".to_string(),
    };
    println!(
        "\n{} sessions × {} events of {} bytes in batches of {}, {} writer tasks, {} partitions, {load}; lz4, linger {} ms, acks=all, idempotent",
        args.sessions,
        args.events,
        args.record_size,
        args.batch,
        args.writers,
        args.partitions,
        settings.producer.linger_ms
    );
    print_table(
        &[
            "round",
            "order",
            "records",
            "sessionlog rec/s",
            "kafka rec/s",
            "ratio",
            "sessionlog ack p50 / p99 ms",
            "kafka ack p50 / p99 ms",
            "p99 ratio",
        ],
        &rows,
    );
    let spread = crate::Spread::of;
    println!(
        "throughput sessionlog/kafka: median {}",
        spread(&throughput)
    );
    println!("ack p50 sessionlog/kafka:    median {}", spread(&p50));
    println!("ack p99 sessionlog/kafka:    median {}", spread(&p99));
    match peak_rss_bytes() {
        Some(bytes) => println!(
            "peak RSS of this process over every round, {} sessions open at a time: {:.1} MiB",
            args.sessions,
            bytes as f64 / (1024.0 * 1024.0)
        ),
        None => println!("peak RSS: unknown on this platform"),
    }
    Ok(())
}

/// One side of a comparison: the settings it runs with and whether each append is confirmed
/// (read back until the fold accepts it) or answered at Kafka's ack.
struct Side<'a> {
    name: &'static str,
    settings: &'a Settings,
    confirm: bool,
}

impl<'a> Side<'a> {
    /// A side whose appends are answered at Kafka's ack.
    fn acked(name: &'static str, settings: &'a Settings) -> Self {
        Self {
            name,
            settings,
            confirm: false,
        }
    }
}

/// Rounds of the same load on two sides, alternating which runs first; prints every round,
/// the median ratio (second / first) of throughput and ack p99, and their spread.
async fn compare(sides: [Side<'_>; 2], rounds: usize, args: &Args) -> Result<()> {
    let [a, b] = &sides;
    let mut rows = Vec::new();
    let (mut throughput, mut p99) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let a_first = round % 2 == 1;
        let order = if a_first { [0, 1] } else { [1, 0] };
        let mut figures = [None, None];
        for i in order {
            let side = &sides[i];
            eprintln!("round {round}: {}", side.name);
            figures[i] = Some(run_ours(side.settings, args, side.confirm, 4096, None).await?);
        }
        let [Some(first), Some(second)] = figures else {
            bail!("round {round} did not run both");
        };
        let (t, p) = (
            second.throughput() / first.throughput(),
            second.p99_ms / first.p99_ms.max(f64::EPSILON),
        );
        throughput.push(t);
        p99.push(p);
        rows.push(vec![
            round.to_string(),
            format!("{}, {}", sides[order[0]].name, sides[order[1]].name),
            format!("{:.0}", first.throughput()),
            format!("{:.0}", second.throughput()),
            format!("{t:.3}"),
            format!("{:.1}", first.p99_ms),
            format!("{:.1}", second.p99_ms),
            format!("{p:.3}"),
        ]);
    }
    println!(
        "\n{} sessions × {} events of {} bytes, {} writer tasks, {} partitions: {} vs {}",
        args.sessions, args.events, args.record_size, args.writers, args.partitions, b.name, a.name
    );
    let headers = [
        "round".to_string(),
        "order".to_string(),
        format!("{} rec/s", a.name),
        format!("{} rec/s", b.name),
        "ratio".to_string(),
        format!("{} p99 ms", a.name),
        format!("{} p99 ms", b.name),
        "ratio".to_string(),
    ];
    print_table(
        &headers.iter().map(String::as_str).collect::<Vec<_>>(),
        &rows,
    );
    let (t, p) = (crate::Spread::of(&throughput), crate::Spread::of(&p99));
    println!("throughput {}/{}: median {t}", b.name, a.name);
    println!("ack p99 {}/{}:    median {p}", b.name, a.name);
    Ok(())
}

/// Opens the sessions, then appends `events` to each from `writers` tasks, timing each ack:
/// each as soon as the last is acknowledged, or with `pace`, each session once every `pace`
/// (staggered across sessions), timed from when the append was due.
async fn run_ours(
    settings: &Settings,
    args: &Args,
    confirm: bool,
    texts: u64,
    pace: Option<Duration>,
) -> Result<Figures> {
    let log = Arc::new(EventLog::from_settings(settings).await?);
    let content = Arc::new(payloads(&log, args.record_size, texts)?);
    let writers = args.writers.max(1);
    let per_writer = args.sessions.div_ceil(writers);

    eprintln!("opening {} sessions ...", args.sessions);
    let mut open = tokio::task::JoinSet::new();
    for _ in 0..writers {
        let log = Arc::clone(&log);
        open.spawn(async move {
            let creates =
                (0..per_writer).map(|_| SessionWriter::create(Arc::clone(&log), "bench", None));
            futures::future::try_join_all(creates).await
        });
    }
    let mut groups = Vec::new();
    while let Some(done) = open.join_next().await {
        groups.push(done??.into_iter().map(|(w, _)| w).collect::<Vec<_>>());
    }

    let acked = Arc::new(AtomicUsize::new(0));
    let total = groups.iter().map(Vec::len).sum::<usize>() * args.events;
    let progress = tokio::spawn({
        let acked = Arc::clone(&acked);
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                tick.tick().await;
                eprintln!(
                    "sessionlog: {} / {total} acknowledged",
                    acked.load(Ordering::Relaxed)
                );
            }
        }
    });
    let started = Instant::now();
    let sessions = groups.iter().map(Vec::len).sum::<usize>().max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for (g, mut group) in groups.into_iter().enumerate() {
        let (content, acked, events) = (Arc::clone(&content), Arc::clone(&acked), args.events);
        let batch = usize::from(args.batch);
        tasks.spawn(async move {
            let appends = group.iter_mut().enumerate().map(|(n, writer)| {
                let (content, acked) = (Arc::clone(&content), Arc::clone(&acked));
                // The session's place among all of them staggers its appends over one period.
                let place = (g * per_writer + n) as f64 / sessions as f64;
                async move {
                    let mut latencies = Vec::with_capacity(events);
                    let mut i = 0;
                    while i < events {
                        let count = batch.min(events - i);
                        let sent = match pace {
                            Some(period) => {
                                let due = started + period.mul_f64(place + i as f64);
                                tokio::time::sleep_until(due.into()).await;
                                due
                            }
                            None => Instant::now(),
                        };
                        // Neighbouring records carry different texts, as real ones do.
                        let batch = (i..i + count)
                            .map(|k| SessionEvent::UserRequest {
                                content: Content::plain(
                                    content[(n * 7919 + k) % content.len()].as_str(),
                                ),
                            })
                            .collect::<Vec<_>>();
                        if confirm {
                            let envelopes = writer.envelopes(batch);
                            writer.append_confirmed(envelopes).await?;
                        } else {
                            writer.append_batch(batch).await?;
                        }
                        let latency = sent.elapsed();
                        latencies.extend(std::iter::repeat_n(latency, count));
                        acked.fetch_add(count, Ordering::Relaxed);
                        i += count;
                    }
                    Ok::<_, sessionlog_producer::Error>(latencies)
                }
            });
            let all = futures::future::try_join_all(appends).await?;
            // The writers stay open (in memory) until every task is done: RSS counts them all.
            Ok::<_, sessionlog_producer::Error>((group, all))
        });
    }
    let mut latencies = Latencies::default();
    let mut keep_open = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (group, all) = done??;
        for sample in all.into_iter().flatten() {
            latencies.record(sample);
        }
        keep_open.push(group);
    }
    let seconds = started.elapsed().as_secs_f64();
    progress.abort();
    log.flush(Duration::from_secs(30)).await?;
    let figures = Figures {
        records: latencies.len(),
        seconds,
        p50_ms: latencies.percentile(50.0).as_secs_f64() * 1e3,
        p99_ms: latencies.percentile(99.0).as_secs_f64() * 1e3,
    };
    drop(keep_open);
    Ok(figures)
}

/// `count` distinct texts such that one `UserRequest` envelope encodes to `record_size` bytes.
///
/// One, like ProducerPerformance's single payload, when comparing with Kafka. Many when
/// comparing two ways of ours, because a batch of identical texts compresses to almost nothing
/// while sealed ones (each under its own nonce) do not compress at all: one shared text would
/// measure lz4, not sealing. With 4,096 no two records within lz4's 64 KiB window are alike.
fn payloads(log: &EventLog, record_size: usize, count: u64) -> Result<Vec<String>> {
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9);
    (0..count.max(1))
        .map(|i| {
            payload(
                log,
                record_size,
                start.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            )
        })
        .collect()
}

/// Text such that one `UserRequest` envelope encodes to `record_size` bytes: random capital
/// letters, as ProducerPerformance fills its records.
fn payload(log: &EventLog, record_size: usize, seed: u64) -> Result<String> {
    let mut seed = seed | 1;
    let mut letter = move || {
        // xorshift64: enough to defeat compression the way ProducerPerformance's payload does.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        char::from(b'A' + (seed % 26) as u8)
    };
    let encoder = EventEncoder::with_schema_id(log.schema_id());
    let probe = |text: String| -> Result<usize> {
        // Stamped now, as the writer stamps what it sends (the time's varint is part of the size).
        let envelope = sessionlog_schemas::EventEnvelope::new(
            sessionlog_schemas::SessionId::new(),
            2,
            1,
            SessionEvent::UserRequest {
                content: Content::plain(text),
            },
        );
        Ok(encoder.encode(&envelope)?.len())
    };
    let overhead = probe(String::new())?;
    if record_size <= overhead + 2 {
        bail!("--record-size must exceed the envelope's {overhead} bytes");
    }
    // The string's length prefix grows by a byte past 63 and 8191 characters; adjust once.
    let mut len = record_size - overhead;
    let text: String = (0..len).map(|_| letter()).collect();
    let extra = probe(text.clone())?.saturating_sub(record_size);
    len -= extra;
    Ok(text[..len].to_string())
}

/// Runs Kafka's ProducerPerformance with the same record size and producer settings, as fast
/// as it can or throttled to `rate` records a second.
fn run_kafka(
    settings: &Settings,
    topic: &str,
    args: &Args,
    records: usize,
    rate: Option<u64>,
) -> Result<Figures> {
    let p = &settings.producer;
    eprintln!(
        "kafka ProducerPerformance: {records} records of {} bytes ...",
        args.record_size
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka-tool");
    let output = Command::new(script)
        .args([
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            &args.record_size.to_string(),
            "--throughput",
            &rate.map_or("-1".to_string(), |r| r.to_string()),
            "--command-property",
            &format!("bootstrap.servers={}", settings.kafka.bootstrap),
            "acks=all",
            "enable.idempotence=true",
            &format!("compression.type={}", p.compression),
            &format!("linger.ms={}", p.linger_ms),
            &format!("batch.size={}", p.batch_size),
        ])
        .output()
        .context("running scripts/kafka-tool ProducerPerformance")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in stdout.lines() {
        eprintln!("kafka: {line}");
    }
    if !output.status.success() {
        bail!(
            "ProducerPerformance failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The last line: "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max
    // latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains("99th"))
        .context("no summary line from ProducerPerformance")?;
    let number_before = |marker: &str| -> Result<f64> {
        let head = summary
            .split(marker)
            .next()
            .with_context(|| format!("{marker:?} in {summary:?}"))?;
        let word = head
            .rsplit([',', ' '])
            .find(|w| !w.is_empty())
            .with_context(|| format!("a number before {marker:?}"))?;
        word.parse()
            .with_context(|| format!("{word:?} before {marker:?}"))
    };
    let sent = number_before(" records sent")? as usize;
    let rate = number_before(" records/sec")?;
    Ok(Figures {
        records: sent,
        seconds: sent as f64 / rate,
        p50_ms: number_before(" ms 50th")?,
        p99_ms: number_before(" ms 99th")?,
    })
}
