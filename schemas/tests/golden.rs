//! Golden bytes: every kept version's bodies must decode, with today's reader, to the
//! envelopes recorded beside them. This is the test that keeps old data in the topic readable.

use sessionlog_schemas::{
    BodyDecoder, CURRENT_SCHEMA_VERSION, EventEnvelope, SessionEvent, encode_body,
    encode_body_for_version, schema_versions,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn golden_dir(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(format!("v{version}"))
}

/// `(name, body, expected)` for every golden file of `version`.
fn golden_files(version: u32) -> Vec<(String, Vec<u8>, EventEnvelope)> {
    let dir = golden_dir(version);
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "avro"))
        .collect();
    entries.sort();
    for avro in entries {
        let name = avro
            .file_stem()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let body = std::fs::read(&avro).expect("readable golden body");
        let json = std::fs::read_to_string(avro.with_extension("json"))
            .unwrap_or_else(|e| panic!("{name}.json beside {name}.avro: {e}"));
        let expected: EventEnvelope = serde_json::from_str(&json).expect("golden json parses");
        out.push((name, body, expected));
    }
    out
}

#[test]
fn every_kept_version_has_golden_files() {
    for v in schema_versions() {
        assert!(
            !golden_files(v.version).is_empty(),
            "no golden files for schema v{}",
            v.version
        );
    }
}

#[test]
fn golden_bodies_of_every_version_decode_with_the_current_reader() {
    for v in schema_versions() {
        let decoder = BodyDecoder::for_version(v.version).expect("decoder for kept version");
        for (name, body, expected) in golden_files(v.version) {
            let got = decoder
                .decode(&body)
                .unwrap_or_else(|e| panic!("v{}/{name}: {e}", v.version));
            assert_eq!(got, expected, "v{}/{name}", v.version);
        }
    }
}

#[test]
fn current_golden_files_cover_every_event_kind() {
    let kinds: BTreeSet<&str> = golden_files(CURRENT_SCHEMA_VERSION)
        .iter()
        .map(|(_, _, e)| e.event.kind())
        .collect();
    // `KINDS` is checked against an exhaustive match in recovery's tests; the match below
    // makes adding a kind fail to compile here until it has a golden example.
    let all = SessionEvent::KINDS;
    assert_eq!(kinds, all.into_iter().collect::<BTreeSet<_>>());
    // Keep the compiler's exhaustiveness check in the loop too.
    let _ = |e: &SessionEvent| match e {
        SessionEvent::SessionStarted { .. }
        | SessionEvent::UserRequest { .. }
        | SessionEvent::ModelResponse { .. }
        | SessionEvent::ToolCallRequested { .. }
        | SessionEvent::ToolCallResult { .. }
        | SessionEvent::SteeringMessage { .. }
        | SessionEvent::ContextSummarized { .. }
        | SessionEvent::PlanUpdated { .. }
        | SessionEvent::ApprovalRequested { .. }
        | SessionEvent::ApprovalDecided { .. }
        | SessionEvent::Checkpoint { .. }
        | SessionEvent::WriterClaimed { .. }
        | SessionEvent::SessionForked { .. }
        | SessionEvent::ResolutionRequired { .. }
        | SessionEvent::SessionPaused { .. }
        | SessionEvent::SessionResumed {}
        | SessionEvent::SessionEnded { .. }
        | SessionEvent::SessionErased { .. }
        | SessionEvent::EventRetracted { .. }
        | SessionEvent::FrameworkStateSaved { .. }
        | SessionEvent::PayloadRedacted { .. } => (),
    };
}

/// The current version's encoder must reproduce its golden bytes exactly: this catches an
/// edit to a released `.avsc` or to the value mapping that would change what is on the wire.
#[test]
fn current_encoder_reproduces_current_golden_bytes() {
    for (name, body, expected) in golden_files(CURRENT_SCHEMA_VERSION) {
        assert_eq!(encode_body(&expected).expect("encodes"), body, "{name}");
    }
}

/// Every kept version's writer, as [`encode_body_for_version`] emulates it, reproduces that
/// version's golden bytes: the records tests write "as an older release" are the bytes that
/// release wrote, not an approximation.
#[test]
fn each_version_encoder_reproduces_its_golden_bytes() {
    for v in schema_versions() {
        for (name, body, expected) in golden_files(v.version) {
            let encoded = encode_body_for_version(v.version, &expected)
                .unwrap_or_else(|e| panic!("v{}/{name}: {e}", v.version));
            assert_eq!(encoded, body, "v{}/{name}", v.version);
        }
    }
}
