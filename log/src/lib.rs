//! The session log on Kafka.
//!
//! - [`settings`]: how a deployment is configured (file plus environment, defaults for the local stack);
//! - [`dead_letters`]: the dead-letter topic: its headers, reading dead letters, replaying them;
//! - [`cluster`]: whether each bootstrap address and broker answers, the protocol each speaks,
//!   and each broker's clock against this host's (`sessionlog doctor`);
//! - [`lease`]: writer leases, a writer's heartbeat on its session in a compacted topic;
//! - [`wake`]: wake records, "this session needs a harness", which workers take work from;
//! - [`group`]: a consumer group's lag per partition and its live members, a topic's depth;
//! - [`topic`]: creating the `session-events` topic and its dead-letter topic with the right settings;
//! - [`partitioner`]: which partition a session lands on (Kafka's murmur2, as every client computes it);
//! - [`positions`]: where a reader of the whole topic starts (offsets, a time, the beginning);
//! - [`reader`]: reading one partition between two offsets, for recovery and read-backs;
//! - [`tail`]: a process's live tail of the topic, which confirmed appends wait on;
//! - [`retry`]: the one retry policy (exponential backoff with jitter) every component uses.

pub mod cluster;
pub mod dead_letters;
pub mod error;
pub mod group;
pub mod lease;
pub mod partitioner;
pub mod positions;
pub mod reader;
pub mod retry;
pub mod round_trip;
pub mod settings;
pub mod tail;
pub mod topic;
mod versioned;
pub mod wake;

pub use dead_letters::{DeadLetter, DeadLetterId, DeadLetters, Lookup, Replayer};
pub use error::{Error, Result};
pub use group::{
    GroupMember, GroupStatus, PartitionLag, PartitionSpan, TopicSpan, group_status, topic_span,
};
pub use lease::Lease;
pub use positions::{StartAt, partition_bounds};
pub use reader::{PartitionReader, RawRecord};
pub use settings::{
    ApiKey, AuthMode, AuthSettings, ConsistencyLevel, CqlConsistency, CqlSettings, IngestSettings,
    KafkaSettings, LeaseSettings, McpAccessSettings, PrivacySettings, ProducerSettings,
    ProjectorSettings, RecoverySettings, RegistrySettings, Resolution, ResolvedSetting,
    RetentionSettings, Role, Secret, SecretRuleSettings, SecretScanMode, SerialConsistencyLevel,
    SettingSource, Settings, WakeSettings,
};
pub use tail::{LogTail, Start, TailOptions};
pub use wake::{Wake, WakeFeed, WakeReason, WakeStream, WakeWriter};
