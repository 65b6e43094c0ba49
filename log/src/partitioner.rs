//! Which partition a session's events land on.
//!
//! Kafka's Java client, and librdkafka with `partitioner=murmur2_random`, place a keyed record on
//! `murmur2(key) & 0x7fffffff % partitions`. Recovery computes the same to find a session
//! without asking anyone.

use sessionlog_schemas::SessionId;

/// The record key of a session's events: its id as text, readable by any client.
pub fn session_key(session: SessionId) -> String {
    session.to_string()
}

/// The partition of `session` in a topic of `partitions` partitions.
pub fn partition_for(session: SessionId, partitions: i32) -> i32 {
    partition_for_key(session_key(session).as_bytes(), partitions)
}

/// Kafka's default partition for a key.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    ((murmur2(key) & 0x7fff_ffff) as i32) % partitions
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), bit for bit.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's own `UtilsTest.testMurmur2`.
    #[test]
    fn matches_kafkas_murmur2_vectors() {
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, expected) in cases {
            assert_eq!(
                murmur2(key) as i32,
                *expected,
                "key {:?}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn partitions_are_in_range() {
        for _ in 0..1000 {
            let p = partition_for(SessionId::new(), 7);
            assert!((0..7).contains(&p));
        }
    }
}
