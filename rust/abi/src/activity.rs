//! The MSPTI Activity API as C sees it (`mspti_activity.h`): kinds, enums, the packed record
//! layouts, and the function-pointer types of every Activity API symbol.
//!
//! Values and layouts are those of docs/reference.md ("Exported functions", "Activity records",
//! "Versions"), from the upstream `mspti_activity.h`. Every record is `__attribute__((packed, aligned(8)))` in C:
//! no padding between fields, total size rounded up to a multiple of 8. Rust cannot combine
//! `packed` with `align`, so each record here is `repr(C, packed)` with an explicit tail pad that
//! makes `size_of` equal the C `sizeof`; alignment is 1, so records may be read from any offset of
//! a buffer (`ptr::read_unaligned`), which is what a consumer must do anyway: 64-bit fields sit at
//! offsets such as 4 and 12.

use core::ffi::{c_char, c_void};

use crate::{MsptiResult, MsptiSubscriberHandle};

/// `msptiActivityKind` (4-byte C enum).
pub type MsptiActivityKind = u32;
pub const MSPTI_ACTIVITY_KIND_INVALID: MsptiActivityKind = 0;
pub const MSPTI_ACTIVITY_KIND_MARKER: MsptiActivityKind = 1;
pub const MSPTI_ACTIVITY_KIND_KERNEL: MsptiActivityKind = 2;
pub const MSPTI_ACTIVITY_KIND_API: MsptiActivityKind = 3;
pub const MSPTI_ACTIVITY_KIND_HCCL: MsptiActivityKind = 4;
pub const MSPTI_ACTIVITY_KIND_MEMORY: MsptiActivityKind = 5;
pub const MSPTI_ACTIVITY_KIND_MEMSET: MsptiActivityKind = 6;
pub const MSPTI_ACTIVITY_KIND_MEMCPY: MsptiActivityKind = 7;
pub const MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: MsptiActivityKind = 8;
pub const MSPTI_ACTIVITY_KIND_COMMUNICATION: MsptiActivityKind = 9;
/// 26.0.0 and later only.
pub const MSPTI_ACTIVITY_KIND_ACL_API: MsptiActivityKind = 10;
/// 26.0.0 and later only.
pub const MSPTI_ACTIVITY_KIND_NODE_API: MsptiActivityKind = 11;
/// 26.0.0 and later only.
pub const MSPTI_ACTIVITY_KIND_RUNTIME_API: MsptiActivityKind = 12;
/// Newest development sources only (MSPTI's own overhead), not in any release branch.
pub const MSPTI_ACTIVITY_KIND_OVERHEAD: MsptiActivityKind = 13;
pub const MSPTI_ACTIVITY_KIND_FORCE_INT: MsptiActivityKind = 0x7fff_ffff;

/// Which MSPTI the ABI facts are about: the kinds, symbols and rules differ between them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
pub enum AbiEra {
    /// MSPTI bundled with CANN 8.x (msprof repo, 2024-2025): `rt*` hooks, kinds 0-9.
    Cann8,
    /// Ascend/mspti 26.0 / 26.1 release branches: `aclrt*` hooks, kinds 0-12, LD_PRELOAD check.
    Mspti26,
    /// The newest development sources: + OVERHEAD, dropped-record count, timestamp control.
    NewestDev,
}

impl AbiEra {
    /// `MSPTI_ACTIVITY_KIND_COUNT` of the era: 10 in 8.x, 13 in 26.x, 14 with OVERHEAD.
    pub const fn kind_count(self) -> u32 {
        match self {
            AbiEra::Cann8 => 10,
            AbiEra::Mspti26 => 13,
            AbiEra::NewestDev => 14,
        }
    }

    /// Whether `msptiActivityEnable(kind)` knows `kind` in this era (INVALID never is).
    pub const fn has_kind(self, kind: MsptiActivityKind) -> bool {
        kind != MSPTI_ACTIVITY_KIND_INVALID && kind < self.kind_count()
    }

    /// Whether enabling `kind` needs `libmspti.so` in LD_PRELOAD (else 26.x returns 6).
    /// 8.x had no check. Newest dev: HCCL always; the memory kinds only when the runtime cannot
    /// report memory itself, which the simulator treats as "can report" (no check).
    pub const fn kind_needs_preload(self, kind: MsptiActivityKind) -> bool {
        match self {
            AbiEra::Cann8 => false,
            AbiEra::Mspti26 => matches!(
                kind,
                MSPTI_ACTIVITY_KIND_HCCL
                    | MSPTI_ACTIVITY_KIND_MEMORY
                    | MSPTI_ACTIVITY_KIND_MEMSET
                    | MSPTI_ACTIVITY_KIND_MEMCPY
            ),
            AbiEra::NewestDev => kind == MSPTI_ACTIVITY_KIND_HCCL,
        }
    }

    /// What `msptiActivityGetNextRecord` returns for a record of unknown kind: 999 (INNER) in
    /// the released versions, 8 (INVALID_KIND) in the newest dev sources.
    pub const fn unknown_kind_result(self) -> MsptiResult {
        match self {
            AbiEra::NewestDev => crate::MSPTI_ERROR_INVALID_KIND,
            _ => crate::MSPTI_ERROR_INNER,
        }
    }

    /// Whether `msptiActivityFlushAll` runs the complete callback under the lock every record
    /// write takes (26.x and newer), or outside it (8.x).
    pub const fn flush_completes_under_record_lock(self) -> bool {
        !matches!(self, AbiEra::Cann8)
    }
}

/// One row of the kind table: the value, the enum name, the short name mspti-lens uses for it,
/// the first era that has it, and the size of its record.
#[derive(Clone, Copy, Debug)]
pub struct ActivityKindInfo {
    pub kind: MsptiActivityKind,
    pub enum_name: &'static str,
    pub short: &'static str,
    pub since: AbiEra,
    pub record_size: usize,
}

macro_rules! kind_row {
    ($k:ident, $short:literal, $since:ident, $rec:ty) => {
        ActivityKindInfo {
            kind: $k,
            enum_name: stringify!($k),
            short: $short,
            since: AbiEra::$since,
            record_size: core::mem::size_of::<$rec>(),
        }
    };
}

/// Every record kind MSPTI defines (INVALID excluded), in value order.
pub const ACTIVITY_KINDS: [ActivityKindInfo; 13] = [
    kind_row!(MSPTI_ACTIVITY_KIND_MARKER, "marker", Cann8, MsptiActivityMarker),
    kind_row!(MSPTI_ACTIVITY_KIND_KERNEL, "kernel", Cann8, MsptiActivityKernel),
    kind_row!(MSPTI_ACTIVITY_KIND_API, "api", Cann8, MsptiActivityApi),
    kind_row!(MSPTI_ACTIVITY_KIND_HCCL, "hccl", Cann8, MsptiActivityHccl),
    kind_row!(MSPTI_ACTIVITY_KIND_MEMORY, "memory", Cann8, MsptiActivityMemory),
    kind_row!(MSPTI_ACTIVITY_KIND_MEMSET, "memset", Cann8, MsptiActivityMemset),
    kind_row!(MSPTI_ACTIVITY_KIND_MEMCPY, "memcpy", Cann8, MsptiActivityMemcpy),
    kind_row!(
        MSPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
        "external_correlation",
        Cann8,
        MsptiActivityExternalCorrelation
    ),
    kind_row!(MSPTI_ACTIVITY_KIND_COMMUNICATION, "communication", Cann8, MsptiActivityCommunication),
    kind_row!(MSPTI_ACTIVITY_KIND_ACL_API, "acl_api", Mspti26, MsptiActivityApi),
    kind_row!(MSPTI_ACTIVITY_KIND_NODE_API, "node_api", Mspti26, MsptiActivityApi),
    kind_row!(MSPTI_ACTIVITY_KIND_RUNTIME_API, "runtime_api", Mspti26, MsptiActivityApi),
    kind_row!(MSPTI_ACTIVITY_KIND_OVERHEAD, "overhead", NewestDev, MsptiActivityOverhead),
];

/// The table row of a kind, if MSPTI defines it.
pub fn activity_kind_info(kind: MsptiActivityKind) -> Option<&'static ActivityKindInfo> {
    ACTIVITY_KINDS.iter().find(|k| k.kind == kind)
}

/// The table row of a short name (`"kernel"`, `"runtime_api"`, ...).
pub fn activity_kind_by_short(short: &str) -> Option<&'static ActivityKindInfo> {
    ACTIVITY_KINDS.iter().find(|k| k.short == short)
}

/// `sizeof` of the record of `kind`: what `msptiActivityGetNextRecord` advances by.
pub fn record_size(kind: MsptiActivityKind) -> Option<usize> {
    activity_kind_info(kind).map(|k| k.record_size)
}

/// `msptiActivitySourceKind`.
pub type MsptiActivitySourceKind = u32;
pub const MSPTI_ACTIVITY_SOURCE_KIND_HOST: MsptiActivitySourceKind = 0;
pub const MSPTI_ACTIVITY_SOURCE_KIND_DEVICE: MsptiActivitySourceKind = 1;

/// `msptiActivityFlag` (bit flags; the MARKER record's `flag`).
pub type MsptiActivityFlag = u32;
pub const MSPTI_ACTIVITY_FLAG_NONE: MsptiActivityFlag = 0;
pub const MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS: MsptiActivityFlag = 1;
pub const MSPTI_ACTIVITY_FLAG_MARKER_START: MsptiActivityFlag = 2;
pub const MSPTI_ACTIVITY_FLAG_MARKER_END: MsptiActivityFlag = 4;
pub const MSPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS_WITH_DEVICE: MsptiActivityFlag = 8;
pub const MSPTI_ACTIVITY_FLAG_MARKER_START_WITH_DEVICE: MsptiActivityFlag = 16;
pub const MSPTI_ACTIVITY_FLAG_MARKER_END_WITH_DEVICE: MsptiActivityFlag = 32;

/// `msptiActivityMemoryOperationType`.
pub type MsptiActivityMemoryOperationType = u32;
pub const MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION: MsptiActivityMemoryOperationType = 0;
pub const MSPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE: MsptiActivityMemoryOperationType = 1;

/// `msptiActivityMemoryKind`.
pub type MsptiActivityMemoryKind = u32;
pub const MSPTI_ACTIVITY_MEMORY_UNKNOWN: MsptiActivityMemoryKind = 0;
pub const MSPTI_ACTIVITY_MEMORY_DEVICE: MsptiActivityMemoryKind = 1;
/// Newest dev only.
pub const MSPTI_ACTIVITY_MEMORY_HOST: MsptiActivityMemoryKind = 2;
/// Newest dev only.
pub const MSPTI_ACTIVITY_MEMORY_MANAGED: MsptiActivityMemoryKind = 3;

/// `msptiActivityMemcpyKind`.
pub type MsptiActivityMemcpyKind = u32;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN: MsptiActivityMemcpyKind = 0;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_HTOH: MsptiActivityMemcpyKind = 1;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_HTOD: MsptiActivityMemcpyKind = 2;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_DTOH: MsptiActivityMemcpyKind = 3;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_DTOD: MsptiActivityMemcpyKind = 4;
pub const MSPTI_ACTIVITY_MEMCPY_KIND_DEFAULT: MsptiActivityMemcpyKind = 5;

/// `msptiExternalCorrelationKind`. The stack behind push/pop is process-global, not per thread.
pub type MsptiExternalCorrelationKind = u32;
pub const MSPTI_EXTERNAL_CORRELATION_KIND_INVALID: MsptiExternalCorrelationKind = 0;
pub const MSPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN: MsptiExternalCorrelationKind = 1;
/// torch_npu's Kineto backend pushes this one around every ATen op: avoid it.
pub const MSPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0: MsptiExternalCorrelationKind = 2;
pub const MSPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1: MsptiExternalCorrelationKind = 3;
pub const MSPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2: MsptiExternalCorrelationKind = 4;
pub const MSPTI_EXTERNAL_CORRELATION_KIND_SIZE: MsptiExternalCorrelationKind = 5;

/// `msptiCommunicationDataType` (COMMUNICATION records' `dataType`).
pub type MsptiCommunicationDataType = u32;
pub const MSPTI_ACTIVITY_COMMUNICATION_INT8: MsptiCommunicationDataType = 0;
pub const MSPTI_ACTIVITY_COMMUNICATION_INT16: MsptiCommunicationDataType = 1;
pub const MSPTI_ACTIVITY_COMMUNICATION_INT32: MsptiCommunicationDataType = 2;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP16: MsptiCommunicationDataType = 3;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP32: MsptiCommunicationDataType = 4;
pub const MSPTI_ACTIVITY_COMMUNICATION_INT64: MsptiCommunicationDataType = 5;
pub const MSPTI_ACTIVITY_COMMUNICATION_UINT64: MsptiCommunicationDataType = 6;
pub const MSPTI_ACTIVITY_COMMUNICATION_UINT8: MsptiCommunicationDataType = 7;
pub const MSPTI_ACTIVITY_COMMUNICATION_UINT16: MsptiCommunicationDataType = 8;
pub const MSPTI_ACTIVITY_COMMUNICATION_UINT32: MsptiCommunicationDataType = 9;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP64: MsptiCommunicationDataType = 10;
pub const MSPTI_ACTIVITY_COMMUNICATION_BFP16: MsptiCommunicationDataType = 11;
pub const MSPTI_ACTIVITY_COMMUNICATION_INT128: MsptiCommunicationDataType = 12;
pub const MSPTI_ACTIVITY_COMMUNICATION_HIF8: MsptiCommunicationDataType = 14;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP8E4M3: MsptiCommunicationDataType = 15;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP8E5M2: MsptiCommunicationDataType = 16;
pub const MSPTI_ACTIVITY_COMMUNICATION_FP8E8M0: MsptiCommunicationDataType = 17;
pub const MSPTI_ACTIVITY_COMMUNICATION_INVALID_TYPE: MsptiCommunicationDataType = 0xFFFF;

/// Bytes per element of a communication data type (INT128 16; the FP8 family 1), if known.
pub const fn communication_type_bytes(t: MsptiCommunicationDataType) -> Option<u64> {
    match t {
        0 | 7 | 14..=17 => Some(1),
        1 | 3 | 8 | 11 => Some(2),
        2 | 4 | 9 => Some(4),
        5 | 6 | 10 => Some(8),
        12 => Some(16),
        _ => None,
    }
}

/// `msptiActivityOverheadKind` (newest dev only).
pub type MsptiActivityOverheadKind = u32;
pub const MSPTI_ACTIVITY_OVERHEAD_UNKNOWN: MsptiActivityOverheadKind = 0;
pub const MSPTI_ACTIVITY_OVERHEAD_MSPTI_RESOURCE: MsptiActivityOverheadKind = 1;
pub const MSPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: MsptiActivityOverheadKind = 2;
pub const MSPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_FLUSH: MsptiActivityOverheadKind = 3;

/// `msptiActivityObjectKind` (newest dev only): which view of `objectId` an OVERHEAD record uses.
pub type MsptiActivityObjectKind = u32;
pub const MSPTI_ACTIVITY_OBJECT_UNKNOWN: MsptiActivityObjectKind = 0;
pub const MSPTI_ACTIVITY_OBJECT_PROCESS: MsptiActivityObjectKind = 1;
pub const MSPTI_ACTIVITY_OBJECT_THREAD: MsptiActivityObjectKind = 2;
pub const MSPTI_ACTIVITY_OBJECT_DEVICE: MsptiActivityObjectKind = 3;

/// `MSPTI_INVALID_DEVICE_ID` / `MSPTI_INVALID_STREAM_ID`.
pub const MSPTI_INVALID_DEVICE_ID: u32 = 0xFFFF_FFFF;
pub const MSPTI_INVALID_STREAM_ID: u32 = 0xFFFF_FFFF;
/// `MSPTI_INVALID_CORRELATION_ID`.
pub const MSPTI_INVALID_CORRELATION_ID: u64 = 0;

/// `msptiActivity`: the common head of every record (kind, then tail padding to 8).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivity {
    pub kind: MsptiActivityKind,
    pub _pad: [u8; 4],
}

/// `{uint32 a; uint32 b}`: the `pt` {processId, threadId} and `ds` {deviceId, streamId} structs
/// inside records, and both views of the `msptiObjectId` union (same 8 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsptiIdPair {
    pub first: u32,
    pub second: u32,
}

impl MsptiIdPair {
    pub const fn pt(process_id: u32, thread_id: u32) -> Self {
        MsptiIdPair { first: process_id, second: thread_id }
    }
    pub const fn ds(device_id: u32, stream_id: u32) -> Self {
        MsptiIdPair { first: device_id, second: stream_id }
    }
    pub const fn process_id(&self) -> u32 {
        self.first
    }
    pub const fn thread_id(&self) -> u32 {
        self.second
    }
    pub const fn device_id(&self) -> u32 {
        self.first
    }
    pub const fn stream_id(&self) -> u32 {
        self.second
    }
}

/// `msptiObjectId` (union of `pt` and `ds`, 8 bytes): which view applies is given by the record
/// (`sourceKind` HOST → pt, DEVICE → ds for markers).
pub type MsptiObjectId = MsptiIdPair;

/// `msptiActivityMarker` (kind 1), 56 bytes. END records and device records have `name` and
/// `domain` pointing to "" (never NULL in the real library).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityMarker {
    pub kind: MsptiActivityKind,
    pub flag: MsptiActivityFlag,
    pub source_kind: MsptiActivitySourceKind,
    pub timestamp: u64,
    pub id: u64,
    pub object_id: MsptiObjectId,
    pub name: *const c_char,
    pub domain: *const c_char,
    pub _pad: [u8; 4],
}

/// `msptiActivityKernel` (kind 2), 56 bytes.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityKernel {
    pub kind: MsptiActivityKind,
    pub start: u64,
    pub end: u64,
    pub ds: MsptiIdPair,
    pub correlation_id: u64,
    pub type_: *const c_char,
    pub name: *const c_char,
    pub _pad: [u8; 4],
}

/// `msptiActivityApi` (kinds API 3, ACL_API 10, NODE_API 11, RUNTIME_API 12), 48 bytes. `name`
/// is the runtime's internal name ("LaunchKernelV2"), not the callback's `functionName`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityApi {
    pub kind: MsptiActivityKind,
    pub start: u64,
    pub end: u64,
    pub pt: MsptiIdPair,
    pub correlation_id: u64,
    pub name: *const c_char,
    pub _pad: [u8; 4],
}

/// `msptiActivityHccl` (kind 4), 56 bytes. `band_width` is bytes/ns (= GB/s), waits included.
/// No correlation id.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityHccl {
    pub kind: MsptiActivityKind,
    pub start: u64,
    pub end: u64,
    pub ds: MsptiIdPair,
    pub band_width: f64,
    pub name: *const c_char,
    pub comm_name: *const c_char,
    pub _pad: [u8; 4],
}

/// `msptiActivityMemory` (kind 5), 64 bytes (no tail padding).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityMemory {
    pub kind: MsptiActivityKind,
    pub memory_operation_type: MsptiActivityMemoryOperationType,
    pub memory_kind: MsptiActivityMemoryKind,
    pub correlation_id: u64,
    pub start: u64,
    pub end: u64,
    pub address: u64,
    pub bytes: u64,
    pub process_id: u32,
    pub device_id: u32,
    pub stream_id: u32,
}

/// `msptiActivityMemset` (kind 6), 56 bytes. Times are the host API's, not the device's.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityMemset {
    pub kind: MsptiActivityKind,
    pub value: u32,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub stream_id: u32,
    pub correlation_id: u64,
    pub is_async: u8,
    pub _pad: [u8; 7],
}

/// `msptiActivityMemcpy` (kind 7), 56 bytes. Times are the host API's, not the device's.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityMemcpy {
    pub kind: MsptiActivityKind,
    pub copy_kind: MsptiActivityMemcpyKind,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub stream_id: u32,
    pub correlation_id: u64,
    pub is_async: u8,
    pub _pad: [u8; 7],
}

/// `msptiActivityExternalCorrelation` (kind 8), 24 bytes.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityExternalCorrelation {
    pub kind: MsptiActivityKind,
    pub external_kind: MsptiExternalCorrelationKind,
    pub external_id: u64,
    pub correlation_id: u64,
}

/// `msptiActivityCommunication` (kind 9), 72 bytes (no tail padding).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityCommunication {
    pub kind: MsptiActivityKind,
    pub data_type: MsptiCommunicationDataType,
    pub count: u64,
    pub ds: MsptiIdPair,
    pub start: u64,
    pub end: u64,
    pub alg_type: *const c_char,
    pub name: *const c_char,
    pub comm_name: *const c_char,
    pub correlation_id: u64,
}

/// `msptiActivityOverhead` (kind 13, newest dev only), 56 bytes. Layout from the newest dev
/// docs (`msptiActivityOverhead.md`); `correlation_id` and `overhead_data` are reserved there.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct MsptiActivityOverhead {
    pub kind: MsptiActivityKind,
    pub overhead_kind: MsptiActivityOverheadKind,
    pub object_id: MsptiObjectId,
    pub start: u64,
    pub end: u64,
    pub correlation_id: u64,
    pub overhead_data: *mut c_void,
    pub object_kind: MsptiActivityObjectKind,
    pub _pad: [u8; 4],
}

// ---------------------------------------------------------------------------------------------
// Function-pointer types of the Activity API (docs/reference.md, "Exported functions"). Bind the post-2024 ones with
// an optional `dlsym`: they exist only from the version noted.

/// `msptiBuffersCallbackRequestFunc`: the user hands out a buffer (may set it to NULL).
pub type MsptiBuffersCallbackRequestFunc =
    Option<unsafe extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_num_records: *mut usize)>;
/// `msptiBuffersCallbackCompleteFunc`: MSPTI hands a buffer back with `valid_size` bytes of records.
/// 26.0/26.1 may call it with (NULL, 0, 0) after a request returned NULL.
pub type MsptiBuffersCallbackCompleteFunc =
    Option<unsafe extern "C" fn(buffer: *mut u8, size: usize, valid_size: usize)>;
/// `msptiTimestampCallbackFunc` (newest dev): MSPTI takes its host timestamps from this.
pub type MsptiTimestampCallbackFunc = Option<unsafe extern "C" fn() -> u64>;

/// `msptiActivityRegisterCallbacks` (2024). A NULL function gives 1.
pub type FnActivityRegisterCallbacks = unsafe extern "C" fn(
    func_buffer_requested: MsptiBuffersCallbackRequestFunc,
    func_buffer_completed: MsptiBuffersCallbackCompleteFunc,
) -> MsptiResult;
/// `msptiActivityEnable` / `msptiActivityDisable` (2024).
pub type FnActivityEnable = unsafe extern "C" fn(kind: MsptiActivityKind) -> MsptiResult;
pub type FnActivityDisable = unsafe extern "C" fn(kind: MsptiActivityKind) -> MsptiResult;
/// `msptiActivityIsEnabled` (26.1): returns C `bool` (1 byte), not `msptiResult`.
pub type FnActivityIsEnabled = unsafe extern "C" fn(kind: MsptiActivityKind) -> bool;
/// `msptiActivityGetNextRecord` (2024). 3 at the end of the buffer; the real one keeps a
/// thread-local offset and ignores `*record`, so iterate one buffer to its end before the next.
pub type FnActivityGetNextRecord = unsafe extern "C" fn(
    buffer: *mut u8,
    valid_buffer_size_bytes: usize,
    record: *mut *mut MsptiActivity,
) -> MsptiResult;
/// `msptiActivityFlushAll` (2024); `flag` is ignored.
pub type FnActivityFlushAll = unsafe extern "C" fn(flag: u32) -> MsptiResult;
/// `msptiActivityFlushPeriod` (Nov 2024): period in ms, 0 off. Hands over only full buffers.
pub type FnActivityFlushPeriod = unsafe extern "C" fn(time: u32) -> MsptiResult;
/// `msptiActivityPushExternalCorrelationId` (Dec 2024).
pub type FnActivityPushExternalCorrelationId =
    unsafe extern "C" fn(kind: MsptiExternalCorrelationKind, id: u64) -> MsptiResult;
/// `msptiActivityPopExternalCorrelationId` (Dec 2024). With `last_id` NULL the real library
/// returns 1 and does not pop; 5 on an empty stack.
pub type FnActivityPopExternalCorrelationId =
    unsafe extern "C" fn(kind: MsptiExternalCorrelationKind, last_id: *mut u64) -> MsptiResult;
/// `msptiActivityEnableMarkerDomain` / `msptiActivityDisableMarkerDomain` (Feb 2025).
pub type FnActivityEnableMarkerDomain = unsafe extern "C" fn(name: *const c_char) -> MsptiResult;
pub type FnActivityDisableMarkerDomain = unsafe extern "C" fn(name: *const c_char) -> MsptiResult;
/// `msptiActivityGetStructSize` (newest dev).
pub type FnActivityGetStructSize =
    unsafe extern "C" fn(kind: MsptiActivityKind, version: u32, size: *mut usize) -> MsptiResult;
/// `msptiActivityGetEnabledKinds` (newest dev).
pub type FnActivityGetEnabledKinds = unsafe extern "C" fn(
    subscriber: MsptiSubscriberHandle,
    buffer: *mut MsptiActivityKind,
    buffer_size: *mut u32,
    enabled_kinds_count: *mut u32,
) -> MsptiResult;
/// `msptiActivityGetNumDroppedRecords` (newest dev): context and stream are ignored; returns the
/// count since the last call and resets it.
pub type FnActivityGetNumDroppedRecords =
    unsafe extern "C" fn(context: *mut c_void, stream_id: u32, dropped: *mut usize) -> MsptiResult;
/// `msptiActivityRegisterTimestampCallback` (newest dev): call before enabling kinds.
pub type FnActivityRegisterTimestampCallback =
    unsafe extern "C" fn(callback: MsptiTimestampCallbackFunc) -> MsptiResult;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    /// The reference's table (docs/reference.md, "Activity records": gcc on the real 26.x headers):
    /// size and the offset of every field.
    #[test]
    fn record_layouts_match_the_reference_offsets() {
        assert_eq!(size_of::<MsptiActivity>(), 8);
        assert_eq!(size_of::<MsptiIdPair>(), 8);

        type M = MsptiActivityMarker;
        assert_eq!(size_of::<M>(), 56);
        assert_eq!(
            [
                offset_of!(M, kind),
                offset_of!(M, flag),
                offset_of!(M, source_kind),
                offset_of!(M, timestamp),
                offset_of!(M, id),
                offset_of!(M, object_id),
                offset_of!(M, name),
                offset_of!(M, domain)
            ],
            [0, 4, 8, 12, 20, 28, 36, 44]
        );

        type K = MsptiActivityKernel;
        assert_eq!(size_of::<K>(), 56);
        assert_eq!(
            [
                offset_of!(K, kind),
                offset_of!(K, start),
                offset_of!(K, end),
                offset_of!(K, ds),
                offset_of!(K, correlation_id),
                offset_of!(K, type_),
                offset_of!(K, name)
            ],
            [0, 4, 12, 20, 28, 36, 44]
        );

        type A = MsptiActivityApi;
        assert_eq!(size_of::<A>(), 48);
        assert_eq!(
            [
                offset_of!(A, kind),
                offset_of!(A, start),
                offset_of!(A, end),
                offset_of!(A, pt),
                offset_of!(A, correlation_id),
                offset_of!(A, name)
            ],
            [0, 4, 12, 20, 28, 36]
        );

        type H = MsptiActivityHccl;
        assert_eq!(size_of::<H>(), 56);
        assert_eq!(
            [
                offset_of!(H, kind),
                offset_of!(H, start),
                offset_of!(H, end),
                offset_of!(H, ds),
                offset_of!(H, band_width),
                offset_of!(H, name),
                offset_of!(H, comm_name)
            ],
            [0, 4, 12, 20, 28, 36, 44]
        );

        type Me = MsptiActivityMemory;
        assert_eq!(size_of::<Me>(), 64);
        assert_eq!(
            [
                offset_of!(Me, kind),
                offset_of!(Me, memory_operation_type),
                offset_of!(Me, memory_kind),
                offset_of!(Me, correlation_id),
                offset_of!(Me, start),
                offset_of!(Me, end),
                offset_of!(Me, address),
                offset_of!(Me, bytes),
                offset_of!(Me, process_id),
                offset_of!(Me, device_id),
                offset_of!(Me, stream_id)
            ],
            [0, 4, 8, 12, 20, 28, 36, 44, 52, 56, 60]
        );

        type S = MsptiActivityMemset;
        assert_eq!(size_of::<S>(), 56);
        assert_eq!(
            [
                offset_of!(S, kind),
                offset_of!(S, value),
                offset_of!(S, bytes),
                offset_of!(S, start),
                offset_of!(S, end),
                offset_of!(S, device_id),
                offset_of!(S, stream_id),
                offset_of!(S, correlation_id),
                offset_of!(S, is_async)
            ],
            [0, 4, 8, 16, 24, 32, 36, 40, 48]
        );

        type C = MsptiActivityMemcpy;
        assert_eq!(size_of::<C>(), 56);
        assert_eq!(
            [
                offset_of!(C, kind),
                offset_of!(C, copy_kind),
                offset_of!(C, bytes),
                offset_of!(C, start),
                offset_of!(C, end),
                offset_of!(C, device_id),
                offset_of!(C, stream_id),
                offset_of!(C, correlation_id),
                offset_of!(C, is_async)
            ],
            [0, 4, 8, 16, 24, 32, 36, 40, 48]
        );

        type E = MsptiActivityExternalCorrelation;
        assert_eq!(size_of::<E>(), 24);
        assert_eq!(
            [
                offset_of!(E, kind),
                offset_of!(E, external_kind),
                offset_of!(E, external_id),
                offset_of!(E, correlation_id)
            ],
            [0, 4, 8, 16]
        );

        type Co = MsptiActivityCommunication;
        assert_eq!(size_of::<Co>(), 72);
        assert_eq!(
            [
                offset_of!(Co, kind),
                offset_of!(Co, data_type),
                offset_of!(Co, count),
                offset_of!(Co, ds),
                offset_of!(Co, start),
                offset_of!(Co, end),
                offset_of!(Co, alg_type),
                offset_of!(Co, name),
                offset_of!(Co, comm_name),
                offset_of!(Co, correlation_id)
            ],
            [0, 4, 8, 16, 24, 32, 40, 48, 56, 64]
        );

        type O = MsptiActivityOverhead;
        assert_eq!(size_of::<O>(), 56);
        assert_eq!(
            [
                offset_of!(O, kind),
                offset_of!(O, overhead_kind),
                offset_of!(O, object_id),
                offset_of!(O, start),
                offset_of!(O, end),
                offset_of!(O, correlation_id),
                offset_of!(O, overhead_data),
                offset_of!(O, object_kind)
            ],
            [0, 4, 8, 16, 24, 32, 40, 48]
        );
    }

    #[test]
    fn records_are_byte_aligned_and_sizes_are_multiples_of_eight() {
        for k in &ACTIVITY_KINDS {
            assert_eq!(k.record_size % 8, 0, "{}", k.enum_name);
        }
        assert_eq!(align_of::<MsptiActivityKernel>(), 1);
        assert_eq!(align_of::<MsptiActivityMarker>(), 1);
    }

    #[test]
    fn kind_table_is_complete_and_in_value_order() {
        for (i, k) in ACTIVITY_KINDS.iter().enumerate() {
            assert_eq!(k.kind, i as u32 + 1);
            assert!(k.enum_name.starts_with("MSPTI_ACTIVITY_KIND_"));
            assert_eq!(k.enum_name["MSPTI_ACTIVITY_KIND_".len()..].to_ascii_lowercase(), k.short);
        }
        assert_eq!(record_size(MSPTI_ACTIVITY_KIND_RUNTIME_API), Some(48));
        assert_eq!(record_size(MSPTI_ACTIVITY_KIND_INVALID), None);
        assert_eq!(activity_kind_by_short("kernel").unwrap().kind, MSPTI_ACTIVITY_KIND_KERNEL);
    }

    #[test]
    fn eras_differ_as_the_reference_says() {
        assert!(AbiEra::Cann8.has_kind(MSPTI_ACTIVITY_KIND_COMMUNICATION));
        assert!(!AbiEra::Cann8.has_kind(MSPTI_ACTIVITY_KIND_RUNTIME_API));
        assert!(AbiEra::Mspti26.has_kind(MSPTI_ACTIVITY_KIND_RUNTIME_API));
        assert!(!AbiEra::Mspti26.has_kind(MSPTI_ACTIVITY_KIND_OVERHEAD));
        assert!(AbiEra::NewestDev.has_kind(MSPTI_ACTIVITY_KIND_OVERHEAD));
        for era in [AbiEra::Cann8, AbiEra::Mspti26, AbiEra::NewestDev] {
            assert!(!era.has_kind(MSPTI_ACTIVITY_KIND_INVALID));
            for k in &ACTIVITY_KINDS {
                assert_eq!(era.has_kind(k.kind), k.since <= era, "{era:?} {}", k.short);
            }
        }
        assert!(!AbiEra::Cann8.kind_needs_preload(MSPTI_ACTIVITY_KIND_HCCL));
        assert!(AbiEra::Mspti26.kind_needs_preload(MSPTI_ACTIVITY_KIND_MEMCPY));
        assert!(!AbiEra::Mspti26.kind_needs_preload(MSPTI_ACTIVITY_KIND_KERNEL));
        assert!(AbiEra::NewestDev.kind_needs_preload(MSPTI_ACTIVITY_KIND_HCCL));
        assert!(!AbiEra::NewestDev.kind_needs_preload(MSPTI_ACTIVITY_KIND_MEMCPY));
        assert_eq!(AbiEra::Mspti26.unknown_kind_result(), 999);
        assert_eq!(AbiEra::NewestDev.unknown_kind_result(), 8);
    }

    #[test]
    fn communication_type_sizes() {
        assert_eq!(communication_type_bytes(MSPTI_ACTIVITY_COMMUNICATION_FP16), Some(2));
        assert_eq!(communication_type_bytes(MSPTI_ACTIVITY_COMMUNICATION_BFP16), Some(2));
        assert_eq!(communication_type_bytes(MSPTI_ACTIVITY_COMMUNICATION_FP32), Some(4));
        assert_eq!(communication_type_bytes(MSPTI_ACTIVITY_COMMUNICATION_INT128), Some(16));
        assert_eq!(communication_type_bytes(13), None);
        assert_eq!(communication_type_bytes(MSPTI_ACTIVITY_COMMUNICATION_INVALID_TYPE), None);
    }
}
