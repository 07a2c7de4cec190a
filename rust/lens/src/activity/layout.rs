//! Provisional copy of the activity record ABI (mspti_abi.md §2-§3), used until the shared
//! definition lands in `mspti_abi::activity` (the devsim helper writes it); then this file goes.

pub const KIND_INVALID: u32 = 0;
pub const KIND_MARKER: u32 = 1;
pub const KIND_KERNEL: u32 = 2;
pub const KIND_API: u32 = 3;
pub const KIND_HCCL: u32 = 4;
pub const KIND_MEMORY: u32 = 5;
pub const KIND_MEMSET: u32 = 6;
pub const KIND_MEMCPY: u32 = 7;
pub const KIND_EXTERNAL_CORRELATION: u32 = 8;
pub const KIND_COMMUNICATION: u32 = 9;
pub const KIND_ACL_API: u32 = 10;
pub const KIND_NODE_API: u32 = 11;
pub const KIND_RUNTIME_API: u32 = 12;
pub const KIND_COUNT: u32 = 13;

/// Packed size of each record kind (None: no record of that kind exists).
pub fn record_size(kind: u32) -> Option<usize> {
    Some(match kind {
        KIND_MARKER | KIND_KERNEL | KIND_HCCL | KIND_MEMSET | KIND_MEMCPY => 56,
        KIND_API | KIND_ACL_API | KIND_NODE_API | KIND_RUNTIME_API => 48,
        KIND_MEMORY => 64,
        KIND_EXTERNAL_CORRELATION => 24,
        KIND_COMMUNICATION => 72,
        _ => return None,
    })
}

pub const MARKER_FLAG: usize = 4;
pub const MARKER_SOURCE_KIND: usize = 8;
pub const MARKER_TIMESTAMP: usize = 12;
pub const MARKER_ID: usize = 20;
pub const MARKER_OBJECT_ID: usize = 28;
pub const MARKER_NAME: usize = 36;
pub const MARKER_DOMAIN: usize = 44;

pub const KERNEL_START: usize = 4;
pub const KERNEL_END: usize = 12;
pub const KERNEL_DS: usize = 20;
pub const KERNEL_CORRELATION_ID: usize = 28;
pub const KERNEL_TYPE: usize = 36;
pub const KERNEL_NAME: usize = 44;

pub const API_START: usize = 4;
pub const API_END: usize = 12;
pub const API_PT: usize = 20;
pub const API_CORRELATION_ID: usize = 28;
pub const API_NAME: usize = 36;

pub const HCCL_START: usize = 4;
pub const HCCL_END: usize = 12;
pub const HCCL_DS: usize = 20;
pub const HCCL_BANDWIDTH: usize = 28;
pub const HCCL_NAME: usize = 36;
pub const HCCL_COMM_NAME: usize = 44;

pub const MEMORY_OPERATION_TYPE: usize = 4;
pub const MEMORY_MEMORY_KIND: usize = 8;
pub const MEMORY_CORRELATION_ID: usize = 12;
pub const MEMORY_START: usize = 20;
pub const MEMORY_END: usize = 28;
pub const MEMORY_ADDRESS: usize = 36;
pub const MEMORY_BYTES: usize = 44;

pub const MEMSET_VALUE: usize = 4;
pub const MEMSET_BYTES: usize = 8;
pub const MEMSET_START: usize = 16;
pub const MEMSET_END: usize = 24;
pub const MEMSET_CORRELATION_ID: usize = 40;

pub const MEMCPY_COPY_KIND: usize = 4;
pub const MEMCPY_BYTES: usize = 8;
pub const MEMCPY_START: usize = 16;
pub const MEMCPY_END: usize = 24;
pub const MEMCPY_CORRELATION_ID: usize = 40;

pub const EXTERNAL_CORRELATION_EXTERNAL_KIND: usize = 4;
pub const EXTERNAL_CORRELATION_EXTERNAL_ID: usize = 8;
pub const EXTERNAL_CORRELATION_CORRELATION_ID: usize = 16;

pub const COMMUNICATION_DATA_TYPE: usize = 4;
pub const COMMUNICATION_COUNT: usize = 8;
pub const COMMUNICATION_DS: usize = 16;
pub const COMMUNICATION_START: usize = 24;
pub const COMMUNICATION_END: usize = 32;
pub const COMMUNICATION_ALG_TYPE: usize = 40;
pub const COMMUNICATION_NAME: usize = 48;
pub const COMMUNICATION_COMM_NAME: usize = 56;
pub const COMMUNICATION_CORRELATION_ID: usize = 64;

pub const SOURCE_HOST: u32 = 0;
pub const SOURCE_DEVICE: u32 = 1;
pub const FLAG_INSTANTANEOUS: u32 = 1;
pub const FLAG_START: u32 = 2;
pub const FLAG_END: u32 = 4;
pub const FLAG_INSTANTANEOUS_WITH_DEVICE: u32 = 8;
pub const FLAG_START_WITH_DEVICE: u32 = 16;
pub const FLAG_END_WITH_DEVICE: u32 = 32;

/// `msptiExternalCorrelationKind::CUSTOM2`: torch_npu's Kineto backend uses CUSTOM0.
pub const EXTERNAL_CUSTOM2: u32 = 4;

/// `msptiActivityMemcpyKind` names by value.
pub const MEMCPY_KINDS: [&str; 6] = ["UNKNOWN", "HTOH", "HTOD", "DTOH", "DTOD", "DEFAULT"];

/// Bytes per element of `msptiCommunicationDataType` (index = value; 0 = unknown).
pub fn data_type_bytes(t: u32) -> u64 {
    match t {
        0 | 7 | 14..=17 => 1,
        1 | 3 | 8 | 11 => 2,
        2 | 4 | 9 => 4,
        5 | 6 | 10 => 8,
        12 => 16,
        _ => 0,
    }
}

// Function types of the Activity API (mspti_abi.md §1b).
pub type FnRequest = unsafe extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize);
pub type FnComplete = unsafe extern "C" fn(buffer: *mut u8, size: usize, valid: usize);
pub type FnRegisterCallbacks = unsafe extern "C" fn(Option<FnRequest>, Option<FnComplete>) -> u32;
pub type FnKind = unsafe extern "C" fn(kind: u32) -> u32;
pub type FnFlushAll = unsafe extern "C" fn(flag: u32) -> u32;
pub type FnFlushPeriod = unsafe extern "C" fn(ms: u32) -> u32;
pub type FnPushExternal = unsafe extern "C" fn(kind: u32, id: u64) -> u32;
pub type FnPopExternal = unsafe extern "C" fn(kind: u32, last: *mut u64) -> u32;
pub type FnMarkerDomain = unsafe extern "C" fn(name: *const core::ffi::c_char) -> u32;
pub type FnStructSize = unsafe extern "C" fn(kind: u32, version: u32, size: *mut usize) -> u32;
pub type FnDropped = unsafe extern "C" fn(context: *mut core::ffi::c_void, stream: u32, n: *mut usize) -> u32;
pub type FnTimestampCallback = unsafe extern "C" fn() -> u64;
pub type FnRegisterTimestamp = unsafe extern "C" fn(Option<FnTimestampCallback>) -> u32;
