//! What the projector's writes send to each table, counted: statements (one per row), cells
//! and bytes of bound values, as Prometheus counters through the `metrics` facade. `sessionlog
//! project` installs the exporter and registers the help texts ([`describe_metrics`], which
//! the projector's own calls); without a recorder (a replay, a bench) the counts go nowhere.
//!
//! Only writes the store acknowledged count: a write that fails and is retried counts once,
//! when it lands. Not counted: the conditional writes of session names ([`crate::names`]) and
//! the rewrites of an ended session's earlier rows with a TTL ([`crate::ProjectionStore::expire_session`]),
//! which are written outside the batches measured here.

use crate::rows::Table;

/// Rows (statements) written, by `table` (the CQL table) and `op` (`insert` or `delete`).
pub const ROWS: &str = "sessionlog_projector_cql_rows_total";
/// Cells written, by `table` and `op`: see [`Sent::cells`].
pub const CELLS: &str = "sessionlog_projector_cql_cells_total";
/// Bytes of bound values written, by `table` and `op`: see [`Sent::bytes`].
pub const BYTES: &str = "sessionlog_projector_cql_bytes_total";

/// Every metric name this module records.
pub const METRICS: &[&str] = &[ROWS, CELLS, BYTES];

/// Registers a help text for every metric above with the installed recorder.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter};
    describe_counter!(
        ROWS,
        Unit::Count,
        "CQL statements (rows) the projector wrote, by table and op (insert or delete)."
    );
    describe_counter!(
        CELLS,
        Unit::Count,
        "Columns the projector's written rows bound (set or null; not unset ones, nor the write timestamp), by table and op."
    );
    describe_counter!(
        BYTES,
        Unit::Bytes,
        "Bytes of bound values the projector's written rows sent (as in the request, length prefixes included), by table and op."
    );
}

/// What one row sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Its columns sent set or null: each is a cell the store writes (a null is a tombstone).
    /// An unset column is not, nor is the `USING TIMESTAMP` value. A deletion's are the key
    /// columns it names.
    pub cells: usize,
    /// Its bound values as serialised into the request: each value's 4-byte length and its
    /// bytes, the write timestamp's included (what [`crate::REQUEST_BYTES`] bounds).
    pub bytes: usize,
}

impl Sent {
    /// A row that does not serialise: too big to share, and its write reports the error (so
    /// it is never counted).
    pub(crate) const UNSERIALISABLE: Self = Self {
        cells: 0,
        bytes: usize::MAX,
    };

    /// Measures a row's serialised values, given, for each bound value in order, whether it
    /// is a column (`false`: the `USING TIMESTAMP` value). Each value is a CQL `[value]`: a
    /// big-endian `i32` length then that many bytes, or -1 (null) or -2 (unset) alone.
    pub(crate) fn of(values: &[u8], columns: impl IntoIterator<Item = bool>) -> Self {
        let mut rest = values;
        let mut cells = 0;
        for column in columns {
            let Some((length, after)) = rest.split_first_chunk::<4>() else {
                break;
            };
            let length = i32::from_be_bytes(*length);
            rest = after;
            if let Ok(length) = usize::try_from(length) {
                rest = rest.get(length..).unwrap_or_default();
            }
            // -2: unset, nothing written.
            if column && length != -2 {
                cells += 1;
            }
        }
        Self {
            cells,
            bytes: values.len(),
        }
    }
}

/// Rows, cells and bytes of one table's writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub rows: u64,
    pub cells: u64,
    pub bytes: u64,
}

/// What a write sent, by table (indexed by `Table as usize`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally([Counts; Table::ALL.len()]);

impl Tally {
    /// Adds up each row's table and what it sent.
    pub(crate) fn of(rows: impl IntoIterator<Item = (Table, Sent)>) -> Self {
        let mut tally = Self::default();
        for (table, sent) in rows {
            let counts = &mut tally.0[table as usize];
            counts.rows += 1;
            counts.cells = counts.cells.saturating_add(sent.cells as u64);
            counts.bytes = counts.bytes.saturating_add(sent.bytes as u64);
        }
        tally
    }

    /// What went to `table`.
    #[cfg(test)]
    pub(crate) fn of_table(&self, table: Table) -> Counts {
        self.0[table as usize]
    }

    /// Adds this tally to the counters. Costs three registry look-ups (a hash of the name and
    /// labels each) per table the write touched, not per row.
    pub(crate) fn record(&self) {
        for (table, counts) in Table::ALL.iter().zip(&self.0) {
            if counts.rows == 0 {
                continue;
            }
            let (name, op) = (table.cql_name(), table.op());
            metrics::counter!(ROWS, "table" => name, "op" => op).increment(counts.rows);
            metrics::counter!(CELLS, "table" => name, "op" => op).increment(counts.cells);
            metrics::counter!(BYTES, "table" => name, "op" => op).increment(counts.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A serialised row: `Some(bytes)` a value, `None` null, and `Err(())` unset.
    fn serialised(values: &[Result<Option<&[u8]>, ()>]) -> Vec<u8> {
        let mut buffer = Vec::new();
        for value in values {
            match value {
                Ok(Some(bytes)) => {
                    buffer.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                    buffer.extend_from_slice(bytes);
                }
                Ok(None) => buffer.extend_from_slice(&(-1i32).to_be_bytes()),
                Err(()) => buffer.extend_from_slice(&(-2i32).to_be_bytes()),
            }
        }
        buffer
    }

    #[test]
    fn a_row_sends_its_set_and_null_columns_and_all_its_bytes() {
        // (id, a null, an unset, text), then the write timestamp.
        let values = serialised(&[
            Ok(Some(&[7; 16])),
            Ok(None),
            Err(()),
            Ok(Some(b"hello")),
            Ok(Some(&[0; 8])),
        ]);
        let sent = Sent::of(&values, [true, true, true, true, false]);
        assert_eq!(
            sent.cells, 3,
            "the unset column and the timestamp are no cells"
        );
        assert_eq!(sent.bytes, 5 * 4 + 16 + 5 + 8);
        // A value of length zero is a cell; bytes are the whole buffer.
        let empty = serialised(&[Ok(Some(b"")), Err(())]);
        assert_eq!(Sent::of(&empty, [true, true]), Sent { cells: 1, bytes: 8 });
    }

    #[test]
    fn a_truncated_row_counts_what_it_holds() {
        let values = serialised(&[Ok(Some(b"abc")), Ok(Some(b"defg"))]);
        // The second value's length and one of its bytes; then only part of its length.
        let sent = Sent::of(&values[..12], [true, true, true]);
        assert_eq!((sent.cells, sent.bytes), (2, 12));
        let sent = Sent::of(&values[..9], [true, true, true]);
        assert_eq!((sent.cells, sent.bytes), (1, 9));
    }

    #[test]
    fn a_tally_adds_up_by_table() {
        let row = |cells, bytes| Sent { cells, bytes };
        let tally = Tally::of([
            (Table::Sessions, row(5, 100)),
            (Table::EventIndex, row(8, 90)),
            (Table::Sessions, row(3, 60)),
            (Table::EventIndex, row(8, 92)),
            (Table::EventIndex, row(8, 91)),
            (Table::AwaitingDelete, row(2, 40)),
        ]);
        let counts = |rows, cells, bytes| Counts { rows, cells, bytes };
        assert_eq!(tally.of_table(Table::Sessions), counts(2, 8, 160));
        assert_eq!(tally.of_table(Table::EventIndex), counts(3, 24, 273));
        assert_eq!(tally.of_table(Table::AwaitingDelete), counts(1, 2, 40));
        assert_eq!(tally.of_table(Table::AwaitingInsert), Counts::default());
        let rows: u64 = tally.0.iter().map(|c| c.rows).sum();
        assert_eq!(rows, 6);
    }
}
