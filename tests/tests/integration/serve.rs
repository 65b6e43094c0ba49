//! The README's quick start, as a reader follows it: `scripts/serve` brings the services up and
//! prints `ready:`, the Python snippet under "Quick start" runs unmodified with what serve wrote
//! (`client.env`: the URLs and a harness token), and Ctrl-C (SIGINT) stops the services while
//! the stack stays up.
//!
//! Serve runs with a directory, ports, topic, keyspace and consumer group of its own, and with the
//! binary the tests use (`SESSIONLOG_BIN`), so it builds nothing and meets no other test.

use anyhow::{Context, Result, bail, ensure};
use sessionlog_testkit::{free_address, python_env, repo_root, sessionlog_bin};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// What the snippet prints: the tool's result, then the session's history.
const PRINTED: &str = "rain in Oslo\n1 SessionStarted\n2 UserRequest\n3 ToolCallRequested\n\
                       4 ToolCallResult\n5 SessionEnded\n";
/// Serve's own readiness deadline (`SESSIONLOG_SERVE_TIMEOUT`): the services start beside a
/// whole test suite on two cores.
const SERVICES_READY_SECS: u64 = 240;
/// Ours for `ready:`, with time for `sessionlog init` before the services start.
const READY_WITHIN: Duration = Duration::from_secs(360);

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_quick_start_runs_against_scripts_serve() -> Result<()> {
    let root = repo_root();
    let run = uuid::Uuid::now_v7().simple().to_string();
    let tag = format!("serve_{}", &run[run.len() - 8..]);
    let dir = std::env::temp_dir().join(format!("sessionlog-{tag}"));
    let ports = [port()?, port()?, port()?, port()?];
    let [ingest, recovery, projector, wake] = ports;

    let mut serve = Command::new(root.join("scripts/serve"));
    serve
        .args(["--ingest-port", &ingest.to_string()])
        .args(["--recovery-port", &recovery.to_string()])
        .args(["--projector-port", &projector.to_string()])
        .args(["--wake-port", &wake.to_string()])
        .env("SESSIONLOG_SERVE_DIR", &dir)
        .env("SESSIONLOG_SERVE_TIMEOUT", SERVICES_READY_SECS.to_string())
        .env("SESSIONLOG_BIN", sessionlog_bin()?)
        .env("SESSIONLOG_CONFIG", "/dev/null")
        // Names under the prefixes the other tests use (see `TestStack::new`).
        .env("SESSIONLOG_KAFKA__TOPIC", format!("session-events-t-{tag}"))
        .env(
            "SESSIONLOG_KAFKA__DEAD_LETTER_TOPIC",
            format!("session-events-t-{tag}-dlq"),
        )
        .env("SESSIONLOG_CQL__KEYSPACE", format!("t_{tag}"))
        .env(
            "SESSIONLOG_PROJECTOR__GROUP_ID",
            format!("sessionlog-t-{tag}"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, so a failing test can take the services down with it.
        .process_group(0);
    let mut serve = Served::spawn(serve)?;

    serve
        .until_ready()
        .await
        .with_context(|| format!("serve's directory: {}", dir.display()))?;
    for name in ["projector", "ingest", "recovery"] {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log")))?;
        let warned: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .collect();
        ensure!(
            warned.is_empty(),
            "{name} started with warnings:\n{}",
            warned.join("\n")
        );
    }

    let snippet = quick_start_snippet(&std::fs::read_to_string(root.join("README.md"))?)?;
    let script = dir.join("quickstart.py");
    std::fs::write(&script, snippet)?;
    // As the README says: source what serve wrote, then run the file.
    let python = Command::new("bash")
        .args(["-c", r#"set -e; . "$1"; exec "$2" "$3""#, "bash"])
        .arg(dir.join("client.env"))
        .arg(python_env()?)
        .arg(&script)
        .env("PYTHONPATH", root.join("clients/python/src"))
        .current_dir(&root)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), python)
        .await
        .context("the quick start did not finish within 120 s")??;
    ensure!(
        out.status.success(),
        "the quick start failed ({}):\n{}{}\nserve said:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        serve.said()
    );
    assert_eq!(String::from_utf8(out.stdout)?, PRINTED);

    let status = serve.interrupt().await?;
    ensure!(
        status.success(),
        "serve exited with {status} after SIGINT:\n{}",
        serve.said()
    );
    for port in ports {
        ensure!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err(),
            "port {port} still answers after serve stopped:\n{}",
            serve.said()
        );
    }
    let stack = std::process::Command::new(root.join("scripts/stack"))
        .arg("status")
        .output()?;
    ensure!(
        stack.status.success(),
        "the stack is not up after serve stopped:\n{}",
        String::from_utf8_lossy(&stack.stdout)
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A port free now.
fn port() -> Result<u16> {
    let address = free_address()?;
    Ok(address.rsplit(':').next().unwrap_or_default().parse()?)
}

/// The first python block of README.md's "Quick start" section.
fn quick_start_snippet(readme: &str) -> Result<String> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Quick start\n"))
        .context("README.md has no \"## Quick start\" section")?;
    let (_, after) = section
        .split_once("\n```python\n")
        .context("README.md's quick start has no ```python block")?;
    let (code, _) = after
        .split_once("\n```")
        .context("README.md's quick start python block does not end")?;
    Ok(format!("{code}\n"))
}

/// `scripts/serve` running: its output gathered as it comes, its process group killed if the
/// test ends before it does.
struct Served {
    child: Child,
    output: Arc<Mutex<String>>,
    /// Serve's stdout until `until_ready` has read it to `ready:`.
    stdout: Option<tokio::io::Lines<BufReader<tokio::process::ChildStdout>>>,
}

impl Served {
    fn spawn(mut command: Command) -> Result<Self> {
        let mut child = command.spawn().context("spawning scripts/serve")?;
        let output = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().context("serve's stderr")?;
        tokio::spawn(gather(stderr, Arc::clone(&output)));
        let stdout = BufReader::new(child.stdout.take().context("serve's stdout")?).lines();
        Ok(Self {
            child,
            output,
            stdout: Some(stdout),
        })
    }

    /// What serve printed so far, both streams.
    fn said(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Reads serve's stdout until its `ready:` line (then goes on reading it in the background).
    async fn until_ready(&mut self) -> Result<()> {
        let mut stdout = self
            .stdout
            .take()
            .context("serve's stdout was read already")?;
        let output = Arc::clone(&self.output);
        let ready = tokio::time::timeout(READY_WITHIN, async {
            while let Some(line) = stdout.next_line().await? {
                let ready = line.starts_with("ready:");
                push(&output, &line);
                if ready {
                    return Ok::<_, anyhow::Error>(true);
                }
            }
            Ok(false)
        })
        .await;
        match ready {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                let status = self.child.wait().await?;
                bail!(
                    "serve exited ({status}) before it was ready:\n{}",
                    self.said()
                )
            }
            Ok(Err(e)) => return Err(e.context("reading serve's stdout")),
            Err(_) => bail!(
                "serve printed no `ready:` within {}s:\n{}",
                READY_WITHIN.as_secs(),
                self.said()
            ),
        }
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                push(&output, &line);
            }
        });
        Ok(())
    }

    /// Ctrl-C: SIGINT to serve alone (not its services: stopping them is serve's job), then its
    /// exit. A shell started with SIGINT ignored (a background job of a script) cannot trap
    /// it, so there SIGTERM, which serve handles the same way, stands in.
    async fn interrupt(&mut self) -> Result<ExitStatus> {
        let pid = self.child.id().context("serve already exited")?;
        let signal = if ignores_sigint(pid) { "-TERM" } else { "-INT" };
        let sent = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        ensure!(sent.success(), "kill {signal} {pid} failed");
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .with_context(|| {
                format!(
                    "serve still runs 60 s after kill {signal}:\n{}",
                    self.said()
                )
            })?
            .context("waiting for serve")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let (Ok(None), Some(pid)) = (self.child.try_wait(), self.child.id()) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

/// Whether `pid` ignores SIGINT (bit 1 of `SigIgn` in its `/proc` status).
fn ignores_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << 1) != 0)
}

fn push(output: &Mutex<String>, line: &str) {
    if let Ok(mut output) = output.lock() {
        output.push_str(line);
        output.push('\n');
    }
}

async fn gather(stream: impl AsyncRead + Unpin, output: Arc<Mutex<String>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        push(&output, &line);
    }
}

#[test]
fn the_snippet_is_the_quick_starts_python_block() -> Result<()> {
    let readme = "# x\n\n## Quick start\n\ntext\n\n```sh\nls\n```\n\n```python\nprint(1)\nprint(2)\n```\n\n\
                  ## From Python\n\n```python\nprint(3)\n```\n";
    assert_eq!(quick_start_snippet(readme)?, "print(1)\nprint(2)\n");
    assert!(quick_start_snippet("## From Python\n```python\nx\n```\n").is_err());
    Ok(())
}
