//! `doctor`'s report as text: aligned tables.

use super::report::Report;
use sessionlog_log::topic::TopicCheck;

/// Lines of `rows` under `headers`, each column as wide as its widest cell.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(" ");
        for (cell, width) in cells.iter().zip(&widths) {
            text.push_str(&format!(" {cell:<width$}"));
        }
        text.trim_end().to_string()
    };
    let mut text = line(headers.to_vec());
    for row in rows {
        text.push('\n');
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

/// The report for people: a table for each part, the notes, then the verdict and each problem
/// with its fix.
pub fn human(report: &Report) -> String {
    let mut text = format!(
        "settings (file: {})\n",
        report.settings_file.as_deref().unwrap_or("none")
    );
    let settings: Vec<Vec<String>> = report
        .settings
        .iter()
        .map(|s| {
            let value = match &s.value {
                serde_json::Value::String(v) => v.clone(),
                other => other.to_string(),
            };
            vec![s.key.clone(), value, s.source.to_string()]
        })
        .collect();
    text.push_str(&table(&["key", "value", "source"], &settings));
    text.push_str("\n\nservers\n");
    let servers: Vec<Vec<String>> = report
        .servers
        .iter()
        .map(|s| {
            vec![
                s.server.to_string(),
                s.role.clone(),
                s.address.clone(),
                s.status.as_str().to_string(),
                s.version.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    text.push_str(&table(
        &["server", "role", "address", "status", "version"],
        &servers,
    ));
    if !report.topics.is_empty() {
        text.push_str("\n\ntopics\n");
        let config = |t: &TopicCheck, key: &str| {
            t.configs
                .get(key)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "-".into())
        };
        let topics: Vec<Vec<String>> = report
            .topics
            .iter()
            .map(|t| {
                vec![
                    t.topic.clone(),
                    if t.exists {
                        t.partitions.to_string()
                    } else {
                        "missing".into()
                    },
                    t.replication_factor.to_string(),
                    config(t, "retention.ms"),
                    config(t, "retention.bytes"),
                    config(t, "cleanup.policy"),
                    config(t, "min.insync.replicas"),
                ]
            })
            .collect();
        text.push_str(&table(
            &[
                "topic",
                "partitions",
                "replicas",
                "retention.ms",
                "retention.bytes",
                "cleanup.policy",
                "min.insync.replicas",
            ],
            &topics,
        ));
    }
    if !report.keyspaces.is_empty() {
        text.push_str("\n\nkeyspaces\n");
        let keyspaces: Vec<Vec<String>> = report
            .keyspaces
            .iter()
            .map(|k| {
                let replication = k
                    .replication
                    .as_ref()
                    .map(|r| {
                        r.iter()
                            .map(|(key, value)| {
                                let value = value.rsplit('.').next().unwrap_or(value);
                                format!("{key}={value}")
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|| "-".into());
                vec![
                    k.keyspace.clone(),
                    k.holds.to_string(),
                    k.state.to_string(),
                    replication,
                ]
            })
            .collect();
        text.push_str(&table(
            &["keyspace", "holds", "state", "replication"],
            &keyspaces,
        ));
    }
    if let Some(clock) = &report.clock {
        text.push_str(&format!(
            "\n\nclock (broker minus this host, via {}; at most {} ms passes)\n",
            clock.topic, clock.max_skew_ms
        ));
        let clocks: Vec<Vec<String>> = clock
            .clocks
            .iter()
            .map(|c| {
                vec![
                    format!("broker {}", c.broker),
                    format!("{:+} ms", c.offset_ms),
                    format!("± {} ms", c.uncertainty_ms),
                ]
            })
            .collect();
        text.push_str(&table(&["broker", "offset", "bound"], &clocks));
    }
    for note in &report.notes {
        text.push_str(&format!("\n\nnote: {note}"));
    }
    if report.healthy {
        text.push_str("\n\nhealthy");
    } else {
        text.push_str(&format!(
            "\n\nunhealthy: {} problem(s)",
            report.problems.len()
        ));
        for p in &report.problems {
            text.push_str(&format!(
                "\n  [{}] {}\n    fix: {}",
                p.check, p.problem, p.fix
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_columns_to_the_widest_cell() {
        let text = table(
            &["key", "value"],
            &[
                vec!["a".into(), "1".into()],
                vec!["longer".into(), "2".into()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["  key    value", "  a      1", "  longer 2"]);
    }
}
