//! `sessionlog init`: the topics, the schemas and the keyspaces, and what differs in the
//! topics that were there.

use crate::args::Globals;
use crate::output::Output;
use anyhow::{Context, Result};
use sessionlog_log::topic;
use sessionlog_schemas::value_subject;
use sessionlog_store::ProjectionStore;

/// The arguments of `sessionlog init`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Change the retention of existing topics to what `[retention]` says (without it,
    /// `init` only reports the differences and the commands that fix them).
    #[arg(long)]
    apply: bool,
}

/// Creates the topics, registers every schema version and migrates the keyspaces.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let settings = &globals.settings;
    let topics = topic::init_topics(&settings.kafka, &settings.retention, args.apply)
        .await
        .with_context(|| format!("creating topics on {}", settings.kafka.bootstrap))?;
    let registry = settings.registry.client()?;
    let schema_id = registry
        .register_all_versions(&value_subject(&settings.kafka.topic))
        .await
        .with_context(|| format!("registering schemas at {}", settings.registry.url))?;
    ProjectionStore::migrate(&settings.cql)
        .await
        .with_context(|| format!("migrating CQL keyspace at {}", settings.cql.nodes))?;
    // The key store: data keys and erasure receipts (created with encryption on or off).
    sessionlog_store::KeyTable::create(settings)
        .await
        .with_context(|| format!("creating the key keyspace {}", settings.privacy.keyspace))?;
    let mut text = format!(
        "topics {} and {} ready; schema id {schema_id}; keyspace {} migrated",
        settings.kafka.topic, settings.kafka.dead_letter_topic, settings.cql.keyspace
    );
    text.push_str(&topic_report_text(&topics, &settings.kafka.bootstrap));
    Output::new(
        &serde_json::json!({
            "topic": settings.kafka.topic,
            "dead_letter_topic": settings.kafka.dead_letter_topic,
            "partitions": settings.kafka.partitions,
            "schema_id": schema_id,
            "keyspace": settings.cql.keyspace,
            "topics_created": topics.created,
            "config_differences": topics.differences,
            "config_changed": topics.changed,
        }),
        text,
    )
}

/// The lines `init` adds about the topics' configuration: what it changed, or what differs
/// and the command that fixes each difference.
fn topic_report_text(report: &topic::TopicReport, bootstrap: &str) -> String {
    let mut text = String::new();
    for changed in &report.changed {
        text.push_str(&format!(
            "\nchanged topic {}: {} from {} to {} ({})",
            changed.topic,
            changed.key,
            changed.actual.as_deref().unwrap_or("unset"),
            changed.wanted,
            changed.setting
        ));
    }
    if !report.differences.is_empty() {
        text.push_str(&format!(
            "\n{} topic setting(s) differ from [retention] and were left as they are; \
             `sessionlog init --apply` changes them, or run the command after each:",
            report.differences.len()
        ));
        for difference in &report.differences {
            text.push_str(&format!(
                "\n  {difference}\n    fix: {}",
                difference.fix_command(bootstrap)
            ));
        }
    }
    text
}
