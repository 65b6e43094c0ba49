//! The JSON records of the operational topics (leases, wakes): a `version` member first read
//! alone, so a record a newer build wrote is refused with that said, not misread.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// `record`, a `kind` record, as JSON. A record that does not serialise is an error, never an
/// empty value: a reader would take an empty record for one it cannot read.
pub(crate) fn encode(record: &impl Serialize, kind: &'static str) -> crate::Result<Vec<u8>> {
    serde_json::to_vec(record).map_err(|source| crate::Error::Encode { kind, source })
}

/// A `kind` record of `version` from `value`, or why it is not one this build reads.
pub(crate) fn decode<T: DeserializeOwned>(
    value: &[u8],
    kind: &str,
    version: u32,
) -> Result<T, String> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        version: u32,
    }
    let versioned: Versioned =
        serde_json::from_slice(value).map_err(|e| format!("not a {kind} record: {e}"))?;
    if versioned.version != version {
        return Err(format!(
            "{kind} record version {} is not {version}, the one this build reads \
             (a newer sessionlog wrote it)",
            versioned.version
        ));
    }
    serde_json::from_slice(value).map_err(|e| format!("not a {kind} record: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_record_that_does_not_serialise_is_an_error_naming_it_not_an_empty_value() {
        // JSON object keys are strings: a map keyed by pairs cannot be written.
        let unwritable: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
        match encode(&unwritable, "lease") {
            Err(error @ crate::Error::Encode { kind: "lease", .. }) => {
                assert!(error.to_string().contains("lease record"), "{error}");
            }
            other => panic!("an encoding error expected, got {other:?}"),
        }
        let written = encode(&BTreeMap::from([("version", 1)]), "wake").expect("encodes");
        assert_eq!(written, br#"{"version":1}"#);
    }
}
