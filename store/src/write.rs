//! Writing rows: one session's rows as one atomic mutation, small sessions sharing a request.

use crate::rows::{CqlRow, Table};
use crate::written::{Sent, Tally};
use crate::{Error, ProjectionStore, Result};
use futures::stream::{self, TryStreamExt};
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;
use scylla::statement::batch::{Batch, BatchStatement, BatchType};

/// Rows of one session written in one request at most: a session with more in a batch (a
/// replay) is written in several, in order, its session row in the last.
pub const ROWS_PER_BATCH: usize = 256;
/// Sessions sharing one request at most: Cassandra's default
/// `unlogged_batch_across_partitions_warn_threshold`.
pub const SESSIONS_PER_REQUEST: usize = 10;
/// Bytes of bound values in a shared request at most. Cassandra refuses a batch of more than
/// one partition above `batch_size_fail_threshold` (50 KiB by default). It counts its own
/// per-cell overhead too: about 1.6 times these bytes for the projector's rows, so 16 KiB
/// stays near 26 KiB by its count. ScyllaDB's limit is 1 MiB.
pub const REQUEST_BYTES: usize = 16 * 1024;

impl ProjectionStore {
    /// Writes `rows` as one logged batch, in order. Rows that share a partition key (one
    /// session's rows, one day's spans, one topic's progress) become a single mutation, which
    /// both Cassandra and ScyllaDB apply atomically: a session's row, its commit point, is
    /// never durable without the event rows written with it. On Cassandra a single-partition
    /// logged batch skips the batch log, so it costs one request instead of one per row.
    ///
    /// Counts what it wrote by table once the store acknowledged it (see [`crate::written`]).
    /// That costs one more serialisation of each row than the driver's own (these rows are
    /// not sized beforehand as [`Self::write_sessions`]' are): a few hundred bytes copied
    /// per row, for the spans by day, usage rollups, lists and progress a batch writes.
    pub async fn write_rows(&self, rows: &[CqlRow]) -> Result<()> {
        self.write_batch(rows.iter(), BatchType::Logged).await?;
        Tally::of(rows.iter().map(|row| (row.table, self.sent(row)))).record();
        Ok(())
    }

    /// Writes each session's rows (`sessions`, one slice each, in order), up to `concurrency`
    /// requests at a time; returns the number of requests. Small sessions share a request: an
    /// unlogged batch still applies each session's rows as one atomic mutation, and it costs
    /// the server one request where there were up to [`SESSIONS_PER_REQUEST`]. A session too
    /// big to share is written alone, in logged batches of at most [`ROWS_PER_BATCH`] rows,
    /// its session row in the last.
    pub async fn write_sessions(
        &self,
        sessions: &[&[CqlRow]],
        concurrency: usize,
    ) -> Result<usize> {
        // Each row is serialised once here to size the requests; what that finds (bytes, and
        // cells from walking the values' length prefixes) is what the write counters add once
        // a request is acknowledged, so counting these rows costs no serialisation of its own.
        let sent: Vec<Vec<Sent>> = sessions
            .iter()
            .map(|rows| rows.iter().map(|row| self.sent(row)).collect())
            .collect();
        let sizes: Vec<(usize, usize)> = sent
            .iter()
            .map(|rows| {
                let bytes = rows.iter().map(|sent| sent.bytes);
                (rows.len(), bytes.fold(0, usize::saturating_add))
            })
            .collect();
        let requests = share_requests(&sizes);
        let count = requests.len();
        let sent = &sent;
        stream::iter(requests.into_iter().map(Ok::<_, Error>))
            .try_for_each_concurrent(concurrency.max(1), |request| async move {
                if request.len() > 1 {
                    let rows = request.iter().flat_map(|&i| sessions[i].iter());
                    match self.write_batch(rows, BatchType::Unlogged).await {
                        Ok(()) => {
                            let rows = request.iter().flat_map(|&i| tables(sessions[i], &sent[i]));
                            Tally::of(rows).record();
                            return Ok(());
                        }
                        // A server with lower batch limits than ours refuses the request:
                        // each session alone is always within them.
                        Err(e) => tracing::debug!(error = %e, "shared write failed; one by one"),
                    }
                }
                for i in request {
                    let chunks = sessions[i].chunks(ROWS_PER_BATCH);
                    for (rows, sent) in chunks.zip(sent[i].chunks(ROWS_PER_BATCH)) {
                        self.write_batch(rows.iter(), BatchType::Logged).await?;
                        Tally::of(tables(rows, sent)).record();
                    }
                }
                Ok(())
            })
            .await?;
        Ok(count)
    }

    /// What a row's bound values send: their size as serialised, and its cells (see
    /// [`Sent`]); a row that does not serialise counts as too big to share (its write then
    /// reports the error).
    fn sent(&self, row: &CqlRow) -> Sent {
        let Ok(writes) = self.writes() else {
            return Sent::UNSERIALISABLE;
        };
        let specs = writes.of(row.table).get_variable_col_specs();
        let context = RowSerializationContext::from_specs(specs.as_slice());
        let mut buffer = Vec::new();
        match row
            .values
            .serialize(&context, &mut RowWriter::new(&mut buffer))
        {
            // Cassandra and ScyllaDB name the bind marker of `USING TIMESTAMP ?` (and `USING
            // TTL ?`) `[timestamp]` (`[ttl]`): it is no column.
            Ok(()) => Sent::of(
                &buffer,
                specs.iter().map(|spec| !spec.name().starts_with('[')),
            ),
            Err(_) => Sent::UNSERIALISABLE,
        }
    }

    async fn write_batch<'r>(
        &self,
        rows: impl Iterator<Item = &'r CqlRow> + Clone,
        kind: BatchType,
    ) -> Result<()> {
        let writes = self.writes()?;
        let statements: Vec<BatchStatement> = rows
            .clone()
            .map(|row| BatchStatement::from(writes.for_row(row).clone()))
            .collect();
        if statements.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new_with_statements(kind, statements);
        batch.set_is_idempotent(true);
        batch.set_consistency(writes.consistency);
        let values: Vec<&(dyn SerializeRow + Send + Sync)> =
            rows.map(|row| row.values.as_ref()).collect();
        self.session
            .batch(&batch, values)
            .await
            .map_err(Error::cql("write rows"))?;
        Ok(())
    }
}

/// Each row's table, with what it sent.
fn tables<'r>(rows: &'r [CqlRow], sent: &'r [Sent]) -> impl Iterator<Item = (Table, Sent)> + 'r {
    rows.iter().zip(sent).map(|(row, sent)| (row.table, *sent))
}

/// Which sessions share a request, given each session's rows and bytes of values: runs of
/// session indexes of at most [`SESSIONS_PER_REQUEST`] sessions and [`REQUEST_BYTES`]; a
/// session bigger than that, or with more than [`ROWS_PER_BATCH`] rows, alone.
fn share_requests(sizes: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut requests = Vec::new();
    let (mut shared, mut shared_bytes) = (Vec::new(), 0);
    for (i, &(rows, bytes)) in sizes.iter().enumerate() {
        if bytes > REQUEST_BYTES || rows > ROWS_PER_BATCH {
            requests.push(vec![i]);
            continue;
        }
        if shared.len() == SESSIONS_PER_REQUEST || shared_bytes + bytes > REQUEST_BYTES {
            requests.push(std::mem::take(&mut shared));
            shared_bytes = 0;
        }
        shared.push(i);
        shared_bytes += bytes;
    }
    if !shared.is_empty() {
        requests.push(shared);
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions_of(requests: &[Vec<usize>]) -> Vec<usize> {
        let mut all: Vec<usize> = requests.iter().flatten().copied().collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn small_sessions_share_requests_up_to_the_session_limit() {
        let sizes = vec![(3, 500); 25];
        let requests = share_requests(&sizes);
        let lens: Vec<usize> = requests.iter().map(Vec::len).collect();
        assert_eq!(lens, [SESSIONS_PER_REQUEST, SESSIONS_PER_REQUEST, 5]);
        assert_eq!(sessions_of(&requests), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn a_shared_request_stays_within_the_byte_limit() {
        let sizes = vec![(4, REQUEST_BYTES / 3 + 1); 7];
        let requests = share_requests(&sizes);
        for request in &requests {
            let bytes: usize = request.iter().map(|&i| sizes[i].1).sum();
            assert!(bytes <= REQUEST_BYTES, "{request:?} holds {bytes} bytes");
        }
        assert_eq!(requests.len(), 4);
        assert_eq!(sessions_of(&requests), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn a_big_session_is_written_alone() {
        let sizes = [
            (2, 100),
            (3, REQUEST_BYTES + 1),
            (ROWS_PER_BATCH + 1, 100),
            (2, 100),
        ];
        let requests = share_requests(&sizes);
        assert!(requests.contains(&vec![1]));
        assert!(requests.contains(&vec![2]));
        assert!(requests.contains(&vec![0, 3]));
        assert_eq!(requests.len(), 3);
    }
}
