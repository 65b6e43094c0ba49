//! The benchmark programs of `sessionlog-bench`, one module each (its subcommand:
//! `sessionlog-bench producer`, `sessionlog-bench claim`, ...), and the pieces they share:
//! latency percentiles, the process's peak resident memory, the result table, and dropping what
//! a run created. Absolute numbers on a shared 2-core machine are noise; every benchmark prints a
//! ratio against a reference measured in the same run.
//!
//! One binary rather than one per benchmark, so a release build links the dependency tree once.

pub mod claim;
pub mod export;
pub mod ingest;
pub mod mcp;
pub mod producer;
pub mod projector;
pub mod recovery;
pub mod rejoin;
pub mod resume;
pub mod span_tenant;
pub mod trace_read;
pub mod wake;

use sessionlog_log::{Settings, topic};
use sessionlog_store::ProjectionStore;
use std::time::{Duration, Instant};

/// Latency samples and their percentiles.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    /// Records one sample.
    pub fn record(&mut self, latency: Duration) {
        self.samples.push(latency);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The `p`-th percentile (0–100), nearest rank; zero without samples.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        self.samples.sort_unstable();
        let rank = ((p / 100.0) * self.samples.len() as f64).ceil() as usize;
        self.samples[rank.clamp(1, self.samples.len()) - 1]
    }

    /// Every sample, in the order recorded (or sorted, after a percentile).
    pub fn samples(&self) -> &[Duration] {
        &self.samples
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        self.samples.iter().copied().max().unwrap_or_default()
    }
}

/// The process's peak resident set size in bytes (`VmHWM`), if the platform tells.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    Some(vm_hwm_kib(&status)? * 1024)
}

/// CPU time used by processes, read from `/proc`: where a benchmark's cores went, so a
/// throughput figure on a shared machine comes with what each process spent per event.
///
/// Written by hand rather than with a crate: it is two fields of `/proc/<pid>/stat` and the
/// first line of `/proc/stat`, in clock ticks of `USER_HZ`, which Linux fixes at 100 for
/// user space whatever the kernel's own tick rate.
pub mod cpu {
    use std::path::Path;

    /// `USER_HZ`: the unit of every tick count in `/proc` (see the module's note).
    const TICKS_PER_SECOND: f64 = 100.0;

    /// User plus system CPU seconds `pid` has used so far; `None` once it has exited.
    pub fn process_seconds(pid: u32) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) is in parentheses and may hold spaces: count fields
        // after its closing one. utime and stime are fields 14 and 15.
        let after = stat.rsplit_once(')')?.1;
        let mut fields = after.split_whitespace().skip(11);
        let user: f64 = fields.next()?.parse().ok()?;
        let system: f64 = fields.next()?.parse().ok()?;
        Some((user + system) / TICKS_PER_SECOND)
    }

    /// CPU seconds the whole machine has been busy (every state but idle and I/O wait) and
    /// the seconds of CPU it had (busy or not), over all cores, since boot.
    pub fn machine_seconds() -> Option<(f64, f64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        let total: f64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
        Some(((total - idle) / TICKS_PER_SECOND, total / TICKS_PER_SECOND))
    }

    /// The pids in `<stack dir>/run/<component>*.pid` (the native stack's processes), e.g.
    /// every broker's for `kafka-`. Empty when the stack runs elsewhere (docker, another host).
    pub fn stack_pids(component: &str) -> Vec<u32> {
        let dir = std::env::var("SESSIONLOG_STACK_DIR").unwrap_or_else(|_| ".stack".into());
        let Ok(entries) = std::fs::read_dir(Path::new(&dir).join("run")) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(component) && name.ends_with(".pid")
            })
            .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
            .collect()
    }

    /// CPU seconds used by named groups of processes and by the machine, between two reads.
    #[derive(Clone, Debug)]
    pub struct Meter {
        groups: Vec<(&'static str, Vec<u32>)>,
        start: Vec<f64>,
        machine: (f64, f64),
    }

    /// What a [`Meter`] measured: each group's CPU seconds, then the machine's busy and total.
    #[derive(Clone, Debug)]
    pub struct Used {
        /// CPU seconds per group, in the meter's order.
        pub groups: Vec<(&'static str, f64)>,
        /// CPU seconds the machine was busy, over all cores.
        pub machine_busy: f64,
        /// CPU seconds the machine had, over all cores (busy or not).
        pub machine_total: f64,
    }

    impl Meter {
        /// Starts measuring each group (a name and its pids).
        pub fn start(groups: Vec<(&'static str, Vec<u32>)>) -> Self {
            let start = groups.iter().map(|(_, pids)| sum(pids)).collect();
            let machine = machine_seconds().unwrap_or_default();
            Self {
                groups,
                start,
                machine,
            }
        }

        /// What each group and the machine used since [`Self::start`].
        pub fn read(&self) -> Used {
            let (busy, total) = machine_seconds().unwrap_or_default();
            Used {
                groups: self
                    .groups
                    .iter()
                    .zip(&self.start)
                    .map(|((name, pids), start)| (*name, (sum(pids) - start).max(0.0)))
                    .collect(),
                machine_busy: (busy - self.machine.0).max(0.0),
                machine_total: (total - self.machine.1).max(0.0),
            }
        }
    }

    impl Used {
        /// What the machine spent outside every group, in CPU seconds.
        pub fn rest(&self) -> f64 {
            (self.machine_busy - self.groups.iter().map(|(_, s)| s).sum::<f64>()).max(0.0)
        }

        /// The share of the machine's CPU that was busy, 0–1.
        pub fn busy_share(&self) -> f64 {
            if self.machine_total > 0.0 {
                self.machine_busy / self.machine_total
            } else {
                0.0
            }
        }
    }

    fn sum(pids: &[u32]) -> f64 {
        pids.iter().filter_map(|p| process_seconds(*p)).sum()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_busy_process_is_seen_spending_cpu_and_the_machine_with_it() {
            let meter = Meter::start(vec![("self", vec![std::process::id()])]);
            let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
            let mut spin = 0u64;
            while std::time::Instant::now() < until {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
            let used = meter.read();
            assert!(used.groups[0].1 >= 0.1, "{used:?}");
            assert!(used.machine_busy >= used.groups[0].1 - 0.02, "{used:?}");
            assert!(
                used.busy_share() > 0.0 && used.busy_share() <= 1.0,
                "{used:?}"
            );
            assert_eq!(process_seconds(u32::MAX), None, "no such process");
        }
    }
}

/// A child process (a `sessionlog` service or command) whose peak resident memory is sampled
/// until it ends; killed when dropped.
pub struct Watched {
    /// The process.
    pub child: std::process::Child,
    peak_kib: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Watched {
    /// Spawns `command` with stdin and stdout closed (stderr is the caller's to decide).
    pub fn spawn(mut command: std::process::Command) -> anyhow::Result<Self> {
        use anyhow::Context;
        use std::sync::atomic::Ordering;
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("spawning sessionlog")?;
        let peak_kib = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (pid, peak) = (child.id(), std::sync::Arc::clone(&peak_kib));
        std::thread::spawn(move || {
            // VmHWM is the kernel's own high-water mark: sampling it often enough to read it
            // before the process exits is all that is needed.
            while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                peak.fetch_max(vm_hwm_kib(&status).unwrap_or_default(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(Self { child, peak_kib })
    }

    /// The highest resident memory seen since the start or the last [`Self::reset_peak`], MiB.
    pub fn peak_mib(&self) -> f64 {
        self.peak_kib.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
    }

    /// The resident memory now and its high-water mark since the start or the last
    /// [`Self::reset_peak`] (`VmRSS`, `VmHWM`), MiB, read at the call rather than sampled;
    /// `None` once the process is gone.
    pub fn resident_mib(&self) -> Option<(f64, f64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let mib = |field| Some(status_kib(&status, field)? as f64 / 1024.0);
        Some((mib("VmRSS:")?, mib("VmHWM:")?))
    }

    /// Starts a new high-water mark from the process's current resident memory (Linux: through
    /// `/proc/PID/clear_refs`), so the next [`Self::peak_mib`] covers one phase alone.
    pub fn reset_peak(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5");
        self.peak_kib.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VmHWM` (peak resident set, KiB) from a `/proc/*/status` text.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    status_kib(status, "VmHWM:")
}

/// A field in KiB (`VmHWM:`, `VmRSS:`) from a `/proc/*/status` text.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Prints rows as an aligned text table with a header.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("{}", line(header.to_vec()));
    println!(
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for row in rows {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
}

/// Gives `settings` a topic, dead-letter topic and keyspace of this run's own
/// (`bench-{name}-{tag}`, `bench_{name}_{tag}`) with `partitions`, so runs never read each
/// other's data and [`drop_run`] removes what this one made. Returns the run's tag.
pub fn isolate_run(settings: &mut Settings, name: &str, partitions: i32) -> String {
    let run = uuid::Uuid::now_v7().simple().to_string();
    let tag = run[run.len() - 8..].to_string();
    settings.kafka.topic = format!("bench-{name}-{tag}");
    settings.kafka.dead_letter_topic = format!("bench-{name}-{tag}-dlq");
    settings.kafka.partitions = partitions;
    settings.cql.keyspace = format!("bench_{name}_{tag}");
    tag
}

/// The end (next offset to be written) of each of `partitions` partitions of `reader`'s topic.
pub async fn partition_ends(
    reader: &sessionlog_log::PartitionReader,
    partitions: i32,
) -> anyhow::Result<std::collections::BTreeMap<i32, i64>> {
    let mut ends = std::collections::BTreeMap::new();
    for p in 0..partitions {
        ends.insert(p, reader.watermarks(p).await?.1);
    }
    Ok(ends)
}

/// Waits until the projector's stored progress on `topic` reaches `ends` on every partition,
/// failing after `limit`; returns how long it took.
pub async fn wait_applied_through(
    store: &ProjectionStore,
    topic: &str,
    ends: &std::collections::BTreeMap<i32, i64>,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let started = std::time::Instant::now();
    loop {
        let progress = store.load_progress(topic).await?;
        let behind: i64 = ends
            .iter()
            .map(|(p, end)| (end - progress.get(p).copied().unwrap_or(0)).max(0))
            .sum();
        if behind == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            anyhow::bail!("the projector is {behind} records behind after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 10 minutes) until the projector has applied everything `settings`' topic
/// holds now; returns how long it took.
pub async fn wait_projected(
    settings: &Settings,
    store: &ProjectionStore,
) -> anyhow::Result<Duration> {
    let reader = sessionlog_log::PartitionReader::new(&settings.kafka, &settings.kafka.topic)?;
    let ends = partition_ends(&reader, settings.kafka.partitions).await?;
    wait_applied_through(
        store,
        &settings.kafka.topic,
        &ends,
        Duration::from_secs(600),
    )
    .await
}

/// Creates the run's topics (those of `settings.kafka`) and registers the event schemas for
/// its topic: what `sessionlog init` does for Kafka and the registry.
pub async fn prepare_topics(settings: &Settings) -> anyhow::Result<()> {
    use anyhow::Context;
    topic::ensure_topics(&settings.kafka)
        .await
        .with_context(|| format!("creating topics on {}", settings.kafka.bootstrap))?;
    settings
        .registry
        .client()?
        .register_all_versions(&sessionlog_schemas::value_subject(&settings.kafka.topic))
        .await
        .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
    Ok(())
}

/// Drops a run's keyspaces and its topics (those of `settings.kafka`), so that runs do not
/// pile data up on the stack: it slows later runs down, as Cassandra keeps memtables and
/// compacts per table.
pub async fn drop_run(
    store: &ProjectionStore,
    settings: &Settings,
    keyspaces: &[String],
) -> anyhow::Result<()> {
    use anyhow::Context;
    for keyspace in keyspaces {
        store
            .drop_keyspace(keyspace)
            .await
            .with_context(|| format!("dropping keyspace {keyspace}"))?;
    }
    topic::delete_topics(&settings.kafka)
        .await
        .context("deleting the run's topics")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut l = Latencies::default();
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        assert_eq!(l.percentile(50.0), Duration::from_millis(50));
        assert_eq!(l.percentile(99.0), Duration::from_millis(99));
        assert_eq!(l.max(), Duration::from_millis(100));
    }

    #[test]
    fn peak_rss_is_known_on_linux() {
        assert!(peak_rss_bytes().is_some_and(|b| b > 0));
    }
}

/// The median of a benchmark's per-round ratios and their range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (zeros when there are none).
    pub fn of(values: &[f64]) -> Self {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Self {
            median,
            min: sorted.first().copied().unwrap_or_default(),
            max: sorted.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} (range {:.3}-{:.3})",
            self.median, self.min, self.max
        )
    }
}

/// A key-encryption key for a benchmark run that compares sealed with plain: the one the
/// settings name, else a fresh one in a temporary directory (dropped with the returned guard).
pub fn bench_kek(settings: &Settings) -> anyhow::Result<(String, Option<TempKek>)> {
    if let Some(file) = &settings.privacy.kek_file {
        return Ok((file.clone(), None));
    }
    let dir = std::env::temp_dir().join(format!("sessionlog-bench-kek-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("kek.key");
    std::fs::write(&file, sessionlog_keys::Kek::generate().to_base64().as_str())?;
    Ok((file.display().to_string(), Some(TempKek(dir))))
}

/// Removes a benchmark's temporary KEK when dropped.
pub struct TempKek(std::path::PathBuf);

impl Drop for TempKek {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes `settings` usable by a benchmark's writers: with encryption on and no KEK configured,
/// a temporary one (kept while the returned guard lives), and the key store created.
pub async fn prepare_privacy(settings: &mut Settings) -> anyhow::Result<Option<TempKek>> {
    if !settings.privacy.encrypt {
        return Ok(None);
    }
    let mut guard = None;
    if settings.privacy.kek_file.is_none() && settings.privacy.kek.is_empty() {
        let (file, temp) = bench_kek(settings)?;
        settings.privacy.kek_file = Some(file);
        guard = temp;
    }
    sessionlog_store::KeyTable::create(settings).await?;
    Ok(guard)
}

/// The same settings with encryption off and on (with a temporary KEK when none is configured,
/// kept while the guard lives, and the key store created): the two sides of an encryption
/// comparison.
pub async fn plain_and_sealed(
    settings: &Settings,
) -> anyhow::Result<(Settings, Settings, Option<TempKek>)> {
    let mut plain = settings.clone();
    plain.privacy.encrypt = false;
    let mut sealed = settings.clone();
    sealed.privacy.encrypt = true;
    let guard = prepare_privacy(&mut sealed).await?;
    Ok((plain, sealed, guard))
}

/// `sessionlog <args>` with `env`, its stderr discarded: a service or projector a benchmark
/// spawns (with [`Watched::spawn`]) beside its measurements.
pub fn sessionlog_command(
    bin: &std::path::Path,
    args: &[&str],
    env: &[(&'static str, String)],
) -> std::process::Command {
    let mut command = std::process::Command::new(bin);
    command
        .args(args)
        .envs(env.iter().cloned())
        .stderr(std::process::Stdio::null());
    command
}

/// The `sessionlog` binary next to the running benchmark (`$SESSIONLOG_BIN` overrides it).
pub fn sessionlog_bin() -> anyhow::Result<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("SESSIONLOG_BIN") {
        return Ok(std::path::PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .map(|dir| dir.join("sessionlog"))
        .ok_or_else(|| anyhow::anyhow!("locating the target directory"))?;
    if !bin.exists() {
        anyhow::bail!(
            "{} not found: cargo build --release -p sessionlog-cli",
            bin.display()
        );
    }
    Ok(bin)
}

/// The environment that points a `sessionlog` process at `settings`' topic, keyspace and
/// servers (and nothing from a config file).
pub fn sessionlog_env(settings: &Settings) -> Vec<(&'static str, String)> {
    vec![
        (
            "SESSIONLOG_KAFKA__BOOTSTRAP",
            settings.kafka.bootstrap.clone(),
        ),
        ("SESSIONLOG_KAFKA__TOPIC", settings.kafka.topic.clone()),
        (
            "SESSIONLOG_KAFKA__PARTITIONS",
            settings.kafka.partitions.to_string(),
        ),
        (
            "SESSIONLOG_KAFKA__DEAD_LETTER_TOPIC",
            settings.kafka.dead_letter_topic.clone(),
        ),
        ("SESSIONLOG_REGISTRY__URL", settings.registry.url.clone()),
        ("SESSIONLOG_CQL__NODES", settings.cql.nodes.clone()),
        ("SESSIONLOG_CQL__KEYSPACE", settings.cql.keyspace.clone()),
        ("SESSIONLOG_CONFIG", "/dev/null".into()),
        (
            "SESSIONLOG_PRIVACY__ENCRYPT",
            settings.privacy.encrypt.to_string(),
        ),
        (
            "SESSIONLOG_PRIVACY__KEK_FILE",
            settings.privacy.kek_file.clone().unwrap_or_default(),
        ),
    ]
}

/// A run whose `sessionlog` services the bench spawns: its own topic and keyspace (made, with
/// the schemas registered), a KEK when encryption is on, a signing key the services trust, and
/// the environment that points them at all of it.
pub struct ServiceRun {
    /// The `sessionlog` binary the services run.
    pub bin: std::path::PathBuf,
    /// The run's settings.
    pub settings: Settings,
    /// The run's keyspace, migrated.
    pub store: ProjectionStore,
    /// The key the services trust; mints the bench's tokens.
    pub auth: BenchAuth,
    /// The services' environment.
    pub env: Vec<(&'static str, String)>,
    _kek: Option<TempKek>,
}

impl ServiceRun {
    /// Prepares a run named `name` on a topic of `partitions` partitions.
    pub async fn prepare(name: &str, partitions: i32) -> anyhow::Result<Self> {
        use anyhow::Context;
        let bin = sessionlog_bin()?;
        let mut settings = Settings::load(None).context("loading settings")?;
        isolate_run(&mut settings, name, partitions);
        let kek = prepare_privacy(&mut settings).await?;
        prepare_topics(&settings).await?;
        let store = ProjectionStore::migrate(&settings.cql).await?;
        let auth = BenchAuth::new()?;
        let mut env = sessionlog_env(&settings);
        env.extend(auth.env());
        Ok(Self {
            bin,
            settings,
            store,
            auth,
            env,
            _kek: kek,
        })
    }

    /// `sessionlog <args>` with the run's environment.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        sessionlog_command(&self.bin, args, &self.env)
    }

    /// Drops the run's keyspace and topics.
    pub async fn drop(&self) -> anyhow::Result<()> {
        drop_run(
            &self.store,
            &self.settings,
            std::slice::from_ref(&self.settings.cql.keyspace),
        )
        .await
    }
}

/// A signing key the run's services trust, and tokens minted with it.
pub struct BenchAuth {
    key: sessionlog_http::auth::SigningKey,
    dir: std::path::PathBuf,
}

impl BenchAuth {
    /// A fresh key, written where the services' settings will point.
    pub fn new() -> anyhow::Result<Self> {
        let key = sessionlog_http::auth::SigningKey::generate()?;
        let dir =
            std::env::temp_dir().join(format!("sessionlog-bench-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("jwks.json"), key.jwks().to_string())?;
        std::fs::write(dir.join("key.pem"), key.pem())?;
        Ok(Self { key, dir })
    }

    /// The services' settings that trust the key (and sign recovery's events with it).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "SESSIONLOG_AUTH__JWKS_FILE",
                self.dir.join("jwks.json").display().to_string(),
            ),
            (
                "SESSIONLOG_RECOVERY__SIGNING_KEY_FILE",
                self.dir.join("key.pem").display().to_string(),
            ),
        ]
    }

    /// A client holding a harness token, with room for `connections` requests at once.
    pub fn client(&self, connections: usize, timeout: Duration) -> anyhow::Result<reqwest::Client> {
        let token = self.key.mint(&sessionlog_http::auth::Grant::new(
            "bench",
            &[sessionlog_log::Role::Harness, sessionlog_log::Role::Reader],
            Duration::from_secs(3600),
        ))?;
        Ok(reqwest::Client::builder()
            .default_headers(sessionlog_http::auth::bearer_headers(&token)?)
            .pool_max_idle_per_host(connections)
            .timeout(timeout)
            .build()?)
    }
}

impl Drop for BenchAuth {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A service's `/metrics` page (Prometheus text).
pub async fn metrics_page(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    Ok(http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// Waits (up to a minute) until the service answers `/health/ready` with 200.
pub async fn wait_ready(http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Ok(answer) = http.get(format!("{base}/health/ready")).send().await
            && answer.status().is_success()
        {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("serve-recovery was not ready within a minute at {base}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `127.0.0.1:<port>` with a port free now: bind :0, read it, release it for the service.
pub fn free_address() -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}
