//! Rejoin benchmark: how long a projector killed with -9 and started again takes to apply what
//! was written before its restart, with dynamic group membership (the group first drops the
//! member it was, after `session.timeout.ms`) and with static membership (`[projector]
//! instance_id`: it takes its partitions back at once). A light load keeps appending
//! throughout. Rounds alternate which goes first; every round is printed, then the median ratio
//! static ÷ dynamic and its spread.
//!
//! ```sh
//! set -a; . .stack/stack.env; set +a
//! cargo build --release -p sessionlog-cli -p sessionlog-benches
//! target/release/sessionlog-bench rejoin --rounds 6
//! ```

use crate::{POLL, Spread, print_table};
use anyhow::Result;
use sessionlog_log::{PartitionReader, Settings};
use sessionlog_producer::{EventLog, ProducerOptions, SessionWriter};
use sessionlog_schemas::{Content, SessionEvent};
use sessionlog_store::ProjectionStore;
use sessionlog_testkit::projector::{partition_ends, wait_applied_through};
use sessionlog_testkit::sessionlog_bin;
use sessionlog_testkit::stack;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(about = "sessionlog project killed and restarted: static vs dynamic group membership")]
pub struct Args {
    /// Rounds; each restarts a projector once with each kind of membership.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Topic partitions.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Events appended per second throughout.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Keep the run's keyspace and topics (by default they are dropped at the end).
    #[arg(long)]
    keep: bool,
}

/// Kills the projector it holds when dropped, so a failed run leaves nothing behind.
struct Projector(Child);

impl Projector {
    fn start(bin: &Path, settings: &Settings, group: &str, instance: &str) -> Result<Self> {
        let mut instance_settings = settings.clone();
        instance_settings.projector.instance_id = instance.into();
        let child = sessionlog_testkit::served::command_with(bin, &instance_settings)?
            .args(["project", "--group", group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self(child))
    }

    fn kill_9(mut self) -> Result<()> {
        self.0.kill()?;
        self.0.wait()?;
        Ok(())
    }
}

impl Drop for Projector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long a projector may take to apply what was written before it started.
const CATCH_UP: Duration = Duration::from_secs(180);

/// Starts a projector in a group of its own, lets it catch up, kills it with -9, starts it
/// again at once, and returns the seconds until it has applied everything written before
/// the restart.
async fn rejoin(
    settings: &Settings,
    store: &ProjectionStore,
    group: &str,
    instance: &str,
) -> Result<f64> {
    let (bin, topic) = (sessionlog_bin()?, settings.kafka.topic.as_str());
    let (reader, partitions) = (
        PartitionReader::new(&settings.kafka, topic)?,
        settings.kafka.partitions,
    );
    let first = Projector::start(&bin, settings, group, instance)?;
    let ends = partition_ends(&reader, partitions).await?;
    wait_applied_through(store, topic, &ends, CATCH_UP, POLL).await?;
    first.kill_9()?;
    // Some record written since its last batch, so that only the restarted one can apply it.
    let before = loop {
        let now = partition_ends(&reader, partitions).await?;
        let progress = store.load_progress(topic).await?;
        if now
            .iter()
            .any(|(p, end)| progress.get(p).copied().unwrap_or(0) < *end)
        {
            break now;
        }
        tokio::time::sleep(POLL).await;
    };
    let restarted = Instant::now();
    let _second = Projector::start(&bin, settings, group, instance)?;
    wait_applied_through(store, topic, &before, CATCH_UP, POLL).await?;
    Ok(restarted.elapsed().as_secs_f64())
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    let mut settings = Settings::load(None)?;
    let tag = stack::isolate(&mut settings, "bench", "rejoin", args.partitions);
    stack::create_topics(&settings).await?;
    let store = ProjectionStore::migrate(&settings.cql).await?;
    crate::prepare_privacy(&mut settings).await?;

    // A light load throughout, so that there is always something to apply after a restart.
    let log = Arc::new(EventLog::connect(&settings, ProducerOptions::default()).await?);
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (log, stop, rate) = (Arc::clone(&log), Arc::clone(&stop), args.rate.max(1));
        async move {
            let (mut writer, _) = SessionWriter::create(log, "bench", None).await?;
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            let mut appended = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let content = Content::plain(format!("request {appended}"));
                writer.append(SessionEvent::UserRequest { content }).await?;
                appended += 1;
            }
            Ok::<_, anyhow::Error>(appended)
        }
    });

    // A projector that has applied something holds partitions: only then does killing it
    // leave a member behind in its group.
    let reader = PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    while partition_ends(&reader, args.partitions)
        .await?
        .values()
        .all(|end| *end == 0)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for round in 1..=args.rounds {
        let static_first = round % 2 == 0;
        let mut seconds = BTreeMap::new();
        for is_static in [static_first, !static_first] {
            let kind = if is_static { "static" } else { "dynamic" };
            eprintln!("round {round}: {kind}");
            let group = format!("sessionlog-rejoin-{tag}-{round}-{kind}");
            let instance = if is_static { "rejoin-bench-1" } else { "" };
            seconds.insert(kind, rejoin(&settings, &store, &group, instance).await?);
        }
        let (dynamic, fixed) = (seconds["dynamic"], seconds["static"]);
        ratios.push(fixed / dynamic);
        rows.push(vec![
            round.to_string(),
            if static_first {
                "static, dynamic"
            } else {
                "dynamic, static"
            }
            .to_string(),
            format!("{dynamic:.2}"),
            format!("{fixed:.2}"),
            format!("{:.3}", fixed / dynamic),
        ]);
    }
    stop.store(true, Ordering::Relaxed);
    let appended = load.await??;

    println!(
        "\nprojector killed with -9 and restarted at once, {} partitions, {} events/s offered \
         ({appended} appended): seconds from the restart until everything written before it \
         is applied",
        args.partitions, args.rate
    );
    print_table(
        &["round", "order", "dynamic s", "static s", "static/dynamic"],
        &rows,
    );
    println!("static/dynamic: median {}", Spread::of(&ratios));
    if !args.keep {
        let keyspace = settings.cql.keyspace.clone();
        crate::drop_run(&store, &settings, &[keyspace]).await?;
    }
    Ok(())
}
