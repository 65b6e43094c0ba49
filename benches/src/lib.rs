//! The benchmark programs of `sessionlog-bench`, one module each (its subcommand:
//! `sessionlog-bench producer`, `sessionlog-bench claim`, ...), and the pieces they share:
//! latency percentiles, the process's peak resident memory, the result table, and dropping what
//! a run created. A run's corner of the stack, the processes it serves (each reading one
//! settings file written from the run's settings) and its tokens come from `sessionlog-testkit`,
//! the harness the integration tests use. Absolute numbers on a shared 2-core machine are noise;
//! every benchmark prints a ratio against a reference measured in the same run.
//!
//! One binary rather than one per benchmark, so a release build links the dependency tree once.

pub mod claim;
pub mod console;
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
use sessionlog_testkit::TestStack;
use std::time::Duration;

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

/// How often a benchmark checks what it waits for: finer than the tests' 100 ms, as the wait
/// is often what it measures.
pub const POLL: Duration = Duration::from_millis(20);

/// Waits (up to 10 minutes) until the projector has applied everything `settings`' topic
/// holds now; returns how long it took.
pub async fn wait_projected(
    settings: &Settings,
    store: &ProjectionStore,
) -> anyhow::Result<Duration> {
    sessionlog_testkit::projector::wait_projected(settings, store, Duration::from_secs(600), POLL)
        .await
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

/// Makes `settings` usable by a benchmark's writers: with encryption on and no KEK configured,
/// this process's test KEK ([`sessionlog_testkit::auth::kek_file`], removed with the scratch
/// directory at the run's end), and the key store created.
pub async fn prepare_privacy(settings: &mut Settings) -> anyhow::Result<()> {
    if !settings.privacy.encrypt {
        return Ok(());
    }
    if settings.privacy.kek_file.is_none() && settings.privacy.kek.is_empty() {
        settings.privacy.kek_file = Some(sessionlog_testkit::auth::kek_file()?);
    }
    sessionlog_store::KeyTable::create(settings).await?;
    Ok(())
}

/// The same settings with encryption off and on (with a KEK as [`prepare_privacy`] gives one,
/// and the key store created): the two sides of an encryption comparison.
pub async fn plain_and_sealed(settings: &Settings) -> anyhow::Result<(Settings, Settings)> {
    let mut plain = settings.clone();
    plain.privacy.encrypt = false;
    let mut sealed = settings.clone();
    sealed.privacy.encrypt = true;
    prepare_privacy(&mut sealed).await?;
    Ok((plain, sealed))
}

/// `settings` sealed twice: every field of a session under its one key (before schema v8),
/// and each field under its own key (the default), with the same KEK.
pub async fn per_session_and_per_record(
    settings: &Settings,
) -> anyhow::Result<(Settings, Settings)> {
    let (_, mut per_record) = plain_and_sealed(settings).await?;
    per_record.privacy.per_record_keys = true;
    let mut per_session = per_record.clone();
    per_session.privacy.per_record_keys = false;
    Ok((per_session, per_record))
}

/// A run whose `sessionlog` services the bench spawns: a corner of the stack of its own
/// ([`TestStack::corner`]: topic and keyspace made, schemas registered, a KEK and a signing key
/// the services trust), each service reading its settings from a file written from
/// [`Self::settings`] as they are when it starts.
pub struct ServiceRun {
    /// The run's settings.
    pub settings: Settings,
    /// The run's keyspace, migrated.
    pub store: ProjectionStore,
}

impl ServiceRun {
    /// Prepares a run named `name` on a topic of `partitions` partitions.
    pub async fn prepare(name: &str, partitions: i32) -> anyhow::Result<Self> {
        let corner = TestStack::corner("bench", name, partitions).await?;
        let store = ProjectionStore::migrate(&corner.settings.cql).await?;
        Ok(Self {
            settings: corner.settings,
            store,
        })
    }

    /// `sessionlog <args>` in the run's corner, its stderr discarded (a service or projector a
    /// benchmark spawns with [`Watched::spawn`] beside its measurements).
    pub fn command(&self, args: &[&str]) -> anyhow::Result<std::process::Command> {
        let mut command = sessionlog_testkit::served::sessionlog(&self.settings, args)?;
        command.stderr(std::process::Stdio::null());
        Ok(command)
    }

    /// A client holding a harness's and a reader's token (subject `bench`), with room for
    /// `connections` requests at once.
    pub fn client(&self, connections: usize, timeout: Duration) -> anyhow::Result<reqwest::Client> {
        let token = sessionlog_testkit::auth::token_with(
            "bench",
            &[sessionlog_log::Role::Harness, sessionlog_log::Role::Reader],
            None,
            Duration::from_secs(3600),
        )?;
        Ok(sessionlog_testkit::auth::client_builder(&token)?
            .pool_max_idle_per_host(connections)
            .timeout(timeout)
            .build()?)
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
