//! The JSON records of the operational topics (leases, wakes): a `version` member first read
//! alone, so a record a newer build wrote is refused with that said, not misread.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// `record` as JSON.
pub(crate) fn encode(record: &impl Serialize) -> Vec<u8> {
    // The records are structs of plain fields, which always serialise.
    serde_json::to_vec(record).unwrap_or_default()
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
