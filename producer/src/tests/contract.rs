//! The log contract ([`crate::testing::contract`]) kept by the in-memory topics.

use crate::ProducerOptions;
use crate::testing::MemoryLog;

crate::log_contract_tests!(async { MemoryLog::new(3).event_log(ProducerOptions::default()) });
