//! The Confluent wire format: magic byte `0`, the writer schema's registry id as a 4-byte
//! big-endian integer, then the raw Avro datum. Every registry-aware Kafka deserializer
//! (Java, Python, Go) reads this framing.

use crate::error::{Error, Result};

/// The magic byte that starts every Confluent-framed message.
pub const MAGIC_BYTE: u8 = 0;

/// Length of the header before the Avro body: the magic byte and the schema id.
pub const HEADER_LEN: usize = 5;

/// Frame an Avro body written with the schema registered under `schema_id`.
pub fn frame(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(MAGIC_BYTE);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Split a framed message into its writer schema id and Avro body.
pub fn unframe(bytes: &[u8]) -> Result<(u32, &[u8])> {
    match bytes {
        [] => Err(Error::EmptyMessage),
        [magic, ..] if *magic != MAGIC_BYTE => Err(Error::BadMagic(*magic)),
        [_, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        short => Err(Error::TooShort(short.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_like_confluent() {
        assert_eq!(frame(7, &[0xAA, 0xBB]), vec![0, 0, 0, 0, 7, 0xAA, 0xBB]);
        assert_eq!(frame(0x0102_0304, &[]), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn unframe_errors_are_specific() {
        assert!(matches!(unframe(&[]), Err(Error::EmptyMessage)));
        assert!(matches!(unframe(&[1, 0, 0, 0, 1]), Err(Error::BadMagic(1))));
        assert!(matches!(unframe(&[0]), Err(Error::TooShort(1))));
        assert!(matches!(unframe(&[0, 0, 0, 1]), Err(Error::TooShort(4))));
        // A header without a body is well framed; the empty body is the Avro decoder's problem.
        assert_eq!(unframe(&[0, 0, 0, 0, 9]).ok(), Some((9, &[][..])));
    }

    proptest! {
        #[test]
        fn frame_unframe_round_trip(id: u32, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let framed = frame(id, &body);
            let (got_id, got_body) = unframe(&framed).expect("own framing must parse");
            prop_assert_eq!(got_id, id);
            prop_assert_eq!(got_body, &body[..]);
        }

        #[test]
        fn unframe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = unframe(&bytes);
        }
    }
}
