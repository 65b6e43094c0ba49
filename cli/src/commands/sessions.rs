//! `sessionlog sessions --orphaned`: the sessions whose writer's lease lapsed.

use crate::args::Globals;
use crate::output::Output;
use anyhow::{Context, Result};
use sessionlog_store::ProjectionStore;

/// The arguments of `sessionlog sessions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Sessions whose writer's lease lapsed (the only listing so far, so required).
    #[arg(long, required = true)]
    orphaned: bool,
}

/// `sessionlog sessions --orphaned`: every session whose writer's lease lapsed and that has
/// not ended, oldest first, with what it waits for.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    // The only listing so far: clap requires the flag.
    debug_assert!(args.orphaned);
    let settings = &globals.settings;
    let store = ProjectionStore::open(&settings.cql)
        .await
        .context("opening the store")?;
    let orphans = sessionlog_wake::orphaned(settings, &store)
        .await
        .context("reading the lease topic (did you run `sessionlog init`?)")?;
    let mut human = format!(
        "{} session(s) without a live writer\n{:<36}  {:<16}  {:<20}  {:>5}  {:>8}  waits for",
        orphans.len(),
        "SESSION",
        "AGENT",
        "LAST HOLDER",
        "EPOCH",
        "AGE"
    );
    for o in &orphans {
        human.push_str(&format!(
            "\n{:<36}  {:<16}  {:<20}  {:>5}  {:>7}s  {}",
            o.session_id,
            o.agent.as_deref().unwrap_or("-"),
            o.holder,
            o.epoch,
            o.age_secs,
            o.waits_for
        ));
    }
    Output::new(&serde_json::json!({ "orphaned": orphans }), human)
}
