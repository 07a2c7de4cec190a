//! The record ABI as the parser reads it: short names for the shared definition in
//! `mspti_abi::activity` (kinds, enum values, and field offsets taken from its packed structs, so
//! nothing here restates a number of the reference).

use core::mem::{offset_of, size_of};

use mspti_abi::activity as a;

pub use a::{record_size, MsptiActivityKind};

pub const KIND_MARKER: u32 = a::MSPTI_ACTIVITY_KIND_MARKER;
pub const KIND_KERNEL: u32 = a::MSPTI_ACTIVITY_KIND_KERNEL;
pub const KIND_API: u32 = a::MSPTI_ACTIVITY_KIND_API;
pub const KIND_HCCL: u32 = a::MSPTI_ACTIVITY_KIND_HCCL;
pub const KIND_MEMORY: u32 = a::MSPTI_ACTIVITY_KIND_MEMORY;
pub const KIND_MEMSET: u32 = a::MSPTI_ACTIVITY_KIND_MEMSET;
pub const KIND_MEMCPY: u32 = a::MSPTI_ACTIVITY_KIND_MEMCPY;
pub const KIND_EXTERNAL_CORRELATION: u32 = a::MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
pub const KIND_COMMUNICATION: u32 = a::MSPTI_ACTIVITY_KIND_COMMUNICATION;
pub const KIND_ACL_API: u32 = a::MSPTI_ACTIVITY_KIND_ACL_API;
pub const KIND_NODE_API: u32 = a::MSPTI_ACTIVITY_KIND_NODE_API;
pub const KIND_RUNTIME_API: u32 = a::MSPTI_ACTIVITY_KIND_RUNTIME_API;
/// One past the largest kind with a known record size (OVERHEAD included: skipped by size).
pub const KIND_COUNT: u32 = a::MSPTI_ACTIVITY_KIND_OVERHEAD + 1;

type M = a::MsptiActivityMarker;
pub const MARKER_SIZE: usize = size_of::<M>();
pub const MARKER_FLAG: usize = offset_of!(M, flag);
pub const MARKER_SOURCE_KIND: usize = offset_of!(M, source_kind);
pub const MARKER_TIMESTAMP: usize = offset_of!(M, timestamp);
pub const MARKER_ID: usize = offset_of!(M, id);
pub const MARKER_OBJECT_ID: usize = offset_of!(M, object_id);
pub const MARKER_NAME: usize = offset_of!(M, name);
pub const MARKER_DOMAIN: usize = offset_of!(M, domain);

type K = a::MsptiActivityKernel;
pub const KERNEL_SIZE: usize = size_of::<K>();
pub const KERNEL_START: usize = offset_of!(K, start);
pub const KERNEL_END: usize = offset_of!(K, end);
pub const KERNEL_DS: usize = offset_of!(K, ds);
pub const KERNEL_CORRELATION_ID: usize = offset_of!(K, correlation_id);
pub const KERNEL_TYPE: usize = offset_of!(K, type_);
pub const KERNEL_NAME: usize = offset_of!(K, name);

type A = a::MsptiActivityApi;
pub const API_SIZE: usize = size_of::<A>();
pub const API_START: usize = offset_of!(A, start);
pub const API_END: usize = offset_of!(A, end);
pub const API_PT: usize = offset_of!(A, pt);
pub const API_CORRELATION_ID: usize = offset_of!(A, correlation_id);
pub const API_NAME: usize = offset_of!(A, name);

type H = a::MsptiActivityHccl;
pub const HCCL_START: usize = offset_of!(H, start);
pub const HCCL_END: usize = offset_of!(H, end);
pub const HCCL_DS: usize = offset_of!(H, ds);
pub const HCCL_BANDWIDTH: usize = offset_of!(H, band_width);
pub const HCCL_NAME: usize = offset_of!(H, name);
pub const HCCL_COMM_NAME: usize = offset_of!(H, comm_name);

type Mem = a::MsptiActivityMemory;
pub const MEMORY_OPERATION_TYPE: usize = offset_of!(Mem, memory_operation_type);
pub const MEMORY_MEMORY_KIND: usize = offset_of!(Mem, memory_kind);
pub const MEMORY_CORRELATION_ID: usize = offset_of!(Mem, correlation_id);
pub const MEMORY_START: usize = offset_of!(Mem, start);
pub const MEMORY_END: usize = offset_of!(Mem, end);
pub const MEMORY_BYTES: usize = offset_of!(Mem, bytes);

type Ms = a::MsptiActivityMemset;
pub const MEMSET_BYTES: usize = offset_of!(Ms, bytes);
pub const MEMSET_START: usize = offset_of!(Ms, start);
pub const MEMSET_END: usize = offset_of!(Ms, end);
pub const MEMSET_CORRELATION_ID: usize = offset_of!(Ms, correlation_id);

type Mc = a::MsptiActivityMemcpy;
pub const MEMCPY_COPY_KIND: usize = offset_of!(Mc, copy_kind);
pub const MEMCPY_BYTES: usize = offset_of!(Mc, bytes);
pub const MEMCPY_START: usize = offset_of!(Mc, start);
pub const MEMCPY_END: usize = offset_of!(Mc, end);
pub const MEMCPY_CORRELATION_ID: usize = offset_of!(Mc, correlation_id);

type E = a::MsptiActivityExternalCorrelation;
pub const EXTERNAL_CORRELATION_EXTERNAL_KIND: usize = offset_of!(E, external_kind);
pub const EXTERNAL_CORRELATION_EXTERNAL_ID: usize = offset_of!(E, external_id);
pub const EXTERNAL_CORRELATION_CORRELATION_ID: usize = offset_of!(E, correlation_id);

type C = a::MsptiActivityCommunication;
pub const COMMUNICATION_SIZE: usize = size_of::<C>();
pub const COMMUNICATION_DATA_TYPE: usize = offset_of!(C, data_type);
pub const COMMUNICATION_COUNT: usize = offset_of!(C, count);
pub const COMMUNICATION_DS: usize = offset_of!(C, ds);
pub const COMMUNICATION_START: usize = offset_of!(C, start);
pub const COMMUNICATION_END: usize = offset_of!(C, end);
pub const COMMUNICATION_NAME: usize = offset_of!(C, name);
pub const COMMUNICATION_COMM_NAME: usize = offset_of!(C, comm_name);
pub const COMMUNICATION_CORRELATION_ID: usize = offset_of!(C, correlation_id);

pub const SOURCE_HOST: u32 = a::MSPTI_ACTIVITY_SOURCE_KIND_HOST;
pub const FLAG_INSTANTANEOUS: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
pub const FLAG_START: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_START;
pub const FLAG_END: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_END;
pub const FLAG_INSTANTANEOUS_WITH_DEVICE: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS_WITH_DEVICE;
pub const FLAG_START_WITH_DEVICE: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_START_WITH_DEVICE;
pub const FLAG_END_WITH_DEVICE: u32 = a::MSPTI_ACTIVITY_FLAG_MARKER_END_WITH_DEVICE;

/// torch_npu's Kineto backend pushes CUSTOM0 around every op; the join uses CUSTOM2.
pub const EXTERNAL_CUSTOM2: u32 = a::MSPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

/// `msptiActivityMemcpyKind` names by value.
pub const MEMCPY_KINDS: [&str; 6] = ["UNKNOWN", "HTOH", "HTOD", "DTOH", "DTOD", "DEFAULT"];

/// Bytes per element of a communication data type (0 when unknown).
pub fn data_type_bytes(t: u32) -> u64 {
    a::communication_type_bytes(t).unwrap_or(0)
}

// The Activity API's function types, as the shared ABI spells them.
pub type FnRequest = unsafe extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize);
pub type FnComplete = unsafe extern "C" fn(buffer: *mut u8, size: usize, valid: usize);
pub type FnRegisterCallbacks = a::FnActivityRegisterCallbacks;
pub type FnKind = a::FnActivityEnable;
pub type FnFlushAll = a::FnActivityFlushAll;
pub type FnFlushPeriod = a::FnActivityFlushPeriod;
pub type FnPushExternal = a::FnActivityPushExternalCorrelationId;
pub type FnPopExternal = a::FnActivityPopExternalCorrelationId;
pub type FnMarkerDomain = a::FnActivityEnableMarkerDomain;
pub type FnStructSize = a::FnActivityGetStructSize;
pub type FnDropped = a::FnActivityGetNumDroppedRecords;
pub type FnRegisterTimestamp = a::FnActivityRegisterTimestampCallback;
