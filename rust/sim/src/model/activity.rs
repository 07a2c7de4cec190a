//! The MSPTI Activity API's switches, over the buffers, the records and the device: which kinds
//! are on (26.x flushes the device's channel before a device kind goes off), what the newest dev
//! reports of them, and the reset the tests start from.

use mspti_abi::*;

use crate::ground::era::{self, era};
use crate::ground::{clock, ids, state};
use crate::model::{buffers, device, mstx, records};

/// `msptiActivityEnable`.
pub fn enable(kind: MsptiActivityKind) -> MsptiResult {
    let e = era();
    if !e.has_kind(kind) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    if e.kind_needs_preload(kind) && state::not_interposed() {
        return MSPTI_ERROR_WITHOUT_LD_PRELOAD;
    }
    state::set_kind_enabled(kind, true);
    MSPTI_SUCCESS
}

/// `msptiActivityDisable`.
pub fn disable(kind: MsptiActivityKind) -> MsptiResult {
    let e = era();
    if !e.has_kind(kind) {
        return MSPTI_ERROR_INVALID_PARAMETER;
    }
    let device_kind = matches!(
        kind,
        MSPTI_ACTIVITY_KIND_MARKER
            | MSPTI_ACTIVITY_KIND_KERNEL
            | MSPTI_ACTIVITY_KIND_HCCL
            | MSPTI_ACTIVITY_KIND_COMMUNICATION
    );
    if device_kind && e >= AbiEra::Mspti26 {
        // 26.x flushes the device channels before the kind goes off; 8.x does not, and what is
        // still in the channel is then lost.
        device::flush_ready();
    }
    state::set_kind_enabled(kind, false);
    MSPTI_SUCCESS
}

/// `msptiActivityIsEnabled` (26.x on).
pub fn is_enabled(kind: MsptiActivityKind) -> bool {
    era::exists_since(AbiEra::Mspti26) && era().has_kind(kind) && state::kind_enabled(kind)
}

/// The kinds enabled now, in kind order (`msptiActivityGetEnabledKinds`).
pub fn enabled_kinds() -> Vec<MsptiActivityKind> {
    (0..32).filter(|&k| state::kind_enabled(k)).collect()
}

/// Back to defaults, for tests: every kind off, buffers handed back (FlushAll), callbacks and
/// the timestamp callback forgotten, device timelines and pending device records cleared,
/// counters, correlation ids, external stacks, marker domains and MSTX ranges reset, and the
/// calling thread's virtual clock back in the present.
pub fn reset() {
    state::clear_kinds();
    clock::virtual_set(0);
    device::reset();
    buffers::reset();
    clock::set_timestamp_callback(None);
    era::set_era_override(0);
    ids::reset();
    records::reset();
    mstx::reset();
}
