//! `sessionlog verify`: two projection keyspaces compared table by table.

use crate::args::Globals;
use crate::output::Output;
use anyhow::{Result, anyhow};
use sessionlog_store::{ProjectionStore, verify};

/// The arguments of `sessionlog verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One keyspace.
    #[arg(long)]
    left: String,
    /// The other.
    #[arg(long)]
    right: String,
}

/// Compares two keyspaces; fails (non-zero exit) when any table differs. Read-only: both
/// keyspaces must exist and be migrated; neither is ever created.
pub async fn run(args: Args, globals: &Globals) -> Result<Output> {
    let (left, right) = (&args.left, &args.right);
    let mut cql = globals.settings.cql.clone();
    cql.keyspace = left.to_string();
    let store = ProjectionStore::open(&cql).await?;
    let comparison = verify::compare(&store, left, right).await?;
    let mut output = Output::json(&comparison)?;
    for t in &comparison.tables {
        output = output.line(format!(
            "{:<24} {:>9} rows {}  {:>9} rows {}  {}",
            t.left.table,
            t.left.rows,
            &t.left.digest[..12],
            t.right.rows,
            &t.right.digest[..12],
            if t.equal() { "same" } else { "DIFFERENT" }
        ));
        for row in &t.only_left {
            output = output.line(format!("  only in {left}: {row}"));
        }
        for row in &t.only_right {
            output = output.line(format!("  only in {right}: {row}"));
        }
    }
    if !comparison.equal() {
        output = output.fail(anyhow!("keyspaces {left} and {right} differ"));
    }
    Ok(output)
}
