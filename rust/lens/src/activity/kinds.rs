//! The catalogue of activity kinds a user may ask for, by the short names of the ABI's kind table.

use super::layout::*;
use crate::error::{Error, Result};

/// The kinds a user may ask for (external correlation and overhead are the collector's own
/// business).
pub const KINDS: [u32; 11] = [
    KIND_KERNEL,
    KIND_API,
    KIND_ACL_API,
    KIND_RUNTIME_API,
    KIND_NODE_API,
    KIND_MARKER,
    KIND_HCCL,
    KIND_COMMUNICATION,
    KIND_MEMORY,
    KIND_MEMCPY,
    KIND_MEMSET,
];

pub fn kind_name(kind: u32) -> &'static str {
    mspti_abi::activity::activity_kind_info(kind).map_or("unknown", |k| k.short)
}

/// The user-facing kind names, in `KINDS` order.
pub fn kind_names() -> Vec<&'static str> {
    KINDS.iter().map(|&k| kind_name(k)).collect()
}

/// The kind of a name, or an error naming the valid ones.
pub fn kind_by_name(name: &str) -> Result<u32> {
    let n = name.trim().to_ascii_lowercase();
    KINDS.iter().copied().find(|&k| kind_name(k) == n).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown activity kind {name:?}; valid kinds are {}",
            kind_names().join(", ")
        ))
    })
}
