//! Which MSPTI the library imitates: the era of its Activity API (by default the fidelity mode's)
//! and the symbols a real library of each era exports.

use std::sync::atomic::{AtomicU32, Ordering};

use mspti_abi::AbiEra;

use crate::ground::state::{self, Fidelity};

/// The version `msptiGetVersion` reports (xxyyzz): the simulator follows MSPTI 26.x.
pub const SIM_MSPTI_VERSION: u32 = 260_200;

/// 0 follow the fidelity (cann8 → 8.x, cann26 → 26.0/26.1, documented → newest dev); 1 8.x;
/// 2 26.x; 3 newest dev.
static ERA_OVERRIDE: AtomicU32 = AtomicU32::new(0);

pub fn era() -> AbiEra {
    match ERA_OVERRIDE.load(Ordering::Relaxed) {
        1 => AbiEra::Cann8,
        2 => AbiEra::Mspti26,
        3 => AbiEra::NewestDev,
        _ => match state::fidelity() {
            Fidelity::Cann8 => AbiEra::Cann8,
            Fidelity::Cann26 => AbiEra::Mspti26,
            Fidelity::Documented => AbiEra::NewestDev,
        },
    }
}

/// 0 follow the fidelity mode, 1 CANN 8.x, 2 MSPTI 26.0/26.1, 3 newest dev; false (and no
/// change) for another value.
pub fn set_era_override(era: u32) -> bool {
    if era > 3 {
        return false;
    }
    ERA_OVERRIDE.store(era, Ordering::Relaxed);
    true
}

/// Every MSPTI symbol this library exports, with the first era a real library has it
/// (the headers of each era). A real library of an older era has no such symbol: the simulator's
/// copy then returns `MSPTI_ERROR_INNER` without effect, and `msimHasSymbol` says 0, so a
/// loader can treat it as absent.
pub const SYMBOLS: [(&str, AbiEra); 30] = [
    ("msptiSubscribe", AbiEra::Cann8),
    ("msptiUnsubscribe", AbiEra::Cann8),
    ("msptiEnableCallback", AbiEra::Cann8),
    ("msptiEnableDomain", AbiEra::Cann8),
    ("msptiActivityRegisterCallbacks", AbiEra::Cann8),
    ("msptiActivityEnable", AbiEra::Cann8),
    ("msptiActivityDisable", AbiEra::Cann8),
    ("msptiActivityGetNextRecord", AbiEra::Cann8),
    ("msptiActivityFlushAll", AbiEra::Cann8),
    ("msptiActivityFlushPeriod", AbiEra::Cann8),
    ("msptiActivityPushExternalCorrelationId", AbiEra::Cann8),
    ("msptiActivityPopExternalCorrelationId", AbiEra::Cann8),
    ("msptiActivityEnableMarkerDomain", AbiEra::Cann8),
    ("msptiActivityDisableMarkerDomain", AbiEra::Cann8),
    ("msptiActivityIsEnabled", AbiEra::Mspti26),
    ("msptiGetResultString", AbiEra::NewestDev),
    ("msptiGetVersion", AbiEra::NewestDev),
    ("msptiGetTimestamp", AbiEra::NewestDev),
    ("msptiActivityGetStructSize", AbiEra::NewestDev),
    ("msptiActivityGetEnabledKinds", AbiEra::NewestDev),
    ("msptiActivityGetNumDroppedRecords", AbiEra::NewestDev),
    ("msptiActivityRegisterTimestampCallback", AbiEra::NewestDev),
    // libms_tools_ext.so, which this library also stands in for.
    ("mstxMarkA", AbiEra::Cann8),
    ("mstxRangeStartA", AbiEra::Cann8),
    ("mstxRangeEnd", AbiEra::Cann8),
    ("mstxDomainCreateA", AbiEra::Cann8),
    ("mstxDomainDestroy", AbiEra::Cann8),
    ("mstxDomainMarkA", AbiEra::Cann8),
    ("mstxDomainRangeStartA", AbiEra::Cann8),
    ("mstxDomainRangeEnd", AbiEra::Cann8),
];

pub fn has_symbol(name: &str) -> bool {
    SYMBOLS.iter().any(|s| s.0 == name && s.1 <= era())
}

/// Whether a real library of the current era has a function that came in `since`.
pub fn exists_since(since: AbiEra) -> bool {
    since <= era()
}
