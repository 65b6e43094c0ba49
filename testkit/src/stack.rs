//! A corner of the real stack for one test or one benchmark run: a topic, dead-letter topic,
//! keyspace and consumer group of its own, so runs side by side never see each other.

use crate::served::{self, ChildGuard};
use crate::{auth, projector};
use anyhow::{Context, Result};
use sessionlog_log::{Settings, topic};
use sessionlog_schemas::value_subject;

/// Gives `settings` a topic (`session-events-{kind}-{name}_{tag}`, its dead letters at
/// `...-dlq`), a keyspace (`{kind}_{name}_{tag}`) and `partitions`, with a tag of this run's
/// own; returns `{name}_{tag}`. The names sit under the prefixes the secure stack's ACLs grant
/// the services (topics `session-events*`, groups `sessionlog-*`), so the same runs work on
/// both tiers. `kind` is `t` for a test, `bench` for a benchmark.
pub fn isolate(settings: &mut Settings, kind: &str, name: &str, partitions: i32) -> String {
    let run = uuid::Uuid::now_v7().simple().to_string();
    let tag = format!("{name}_{}", &run[run.len() - 8..]);
    settings.kafka.topic = format!("session-events-{kind}-{tag}");
    settings.kafka.dead_letter_topic = format!("session-events-{kind}-{tag}-dlq");
    settings.kafka.partitions = partitions;
    settings.cql.keyspace = format!("{kind}_{tag}");
    tag
}

/// The consumer group of a run of `kind` that [`isolate`] tagged `tag`: under the prefix the
/// secure stack's ACLs grant the services (`sessionlog-*`).
pub fn group(kind: &str, tag: &str) -> String {
    format!("sessionlog-{kind}-{tag}")
}

/// Creates the topics of `settings.kafka` and registers every event schema version for its
/// topic: what `sessionlog init` does for Kafka and the registry.
pub async fn create_topics(settings: &Settings) -> Result<()> {
    topic::ensure_topics(&settings.kafka)
        .await
        .with_context(|| {
            format!(
                "creating topics on {} (is the stack up? `scripts/stack up`)",
                settings.kafka.bootstrap
            )
        })?;
    settings
        .registry
        .client()?
        .register_all_versions(&value_subject(&settings.kafka.topic))
        .await
        .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
    Ok(())
}

/// One test's private corner of the stack.
#[derive(Clone)]
pub struct TestStack {
    /// Settings naming the test's own topic, dead-letter topic and keyspace, trusting this
    /// process's test key ([`auth`]) and sealing with its key-encryption key.
    pub settings: Settings,
    /// A consumer group unique to the test.
    pub group: String,
}

impl TestStack {
    /// Creates a topic of `partitions` partitions, registers the schemas and creates a fresh
    /// keyspace and key store, all unique to this test: what `sessionlog init` does. (Readers
    /// such as recovery only open an existing keyspace; they never create one.)
    pub async fn new(name: &str, partitions: i32) -> Result<Self> {
        Self::corner("t", name, partitions).await
    }

    /// [`Self::new`] for a run of `kind` (`t` for a test, `bench` for a benchmark).
    pub async fn corner(kind: &str, name: &str, partitions: i32) -> Result<Self> {
        let mut settings = Settings::load(None).context("loading settings from the environment")?;
        let tag = isolate(&mut settings, kind, name, partitions);
        settings.auth = auth::settings()?;
        settings.recovery.signing_key_file = Some(auth::signing_key_file()?);
        // A key-encryption key the settings name is kept (a benchmark's run may bring one).
        if settings.privacy.kek_file.is_none() && settings.privacy.kek.is_empty() {
            settings.privacy.kek_file = Some(auth::kek_file()?);
        }
        create_topics(&settings).await?;
        sessionlog_store::ProjectionStore::migrate(&settings.cql)
            .await
            .with_context(|| format!("creating keyspace {}", settings.cql.keyspace))?;
        sessionlog_store::KeyTable::create(&settings)
            .await
            .with_context(|| format!("creating keyspace {}", settings.privacy.keyspace))?;
        Ok(Self {
            settings,
            group: group(kind, &tag),
        })
    }

    /// `sessionlog <args>` in this corner: its settings file written from
    /// [`Self::settings`] as they are now (see [`served`]).
    pub fn command(&self, args: &[&str]) -> Result<std::process::Command> {
        served::sessionlog(&self.settings, args)
    }

    /// Runs `sessionlog <args>` in this corner and waits for it to exit.
    pub fn sessionlog(&self, args: &[&str]) -> Result<std::process::Output> {
        self.command(args)?
            .output()
            .with_context(|| format!("running sessionlog {args:?}"))
    }

    /// Starts `sessionlog project` as a separate process in this test's consumer group.
    pub fn spawn_projector(&self) -> Result<ChildGuard> {
        projector::spawn_projector_with(self, &[])
    }
}
