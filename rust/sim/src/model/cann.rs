//! What CANN writes into the records' text fields, where the simulator has to choose: the
//! COMMUNICATION op names HCCL reports, kernel task types the runtime registers, element sizes of
//! HCCL's data types, and the algorithm HCCL picks. Sources and the simulator's own choices are
//! in docs/simulator_fidelity.md.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The op name HCCL reports for a collective (its profiling table of op types, `PROF_OP_NAME_V2`),
/// which MSPTI puts into COMMUNICATION records and into the op's API record: `hcom_allReduce_`,
/// not the `HcclAllReduce` function name the callbacks and HCCL records carry.
pub fn comm_op_name(hccl_cbid: u32) -> &'static CStr {
    match hccl_cbid {
        1 => c"hcom_allReduce_",
        2 => c"hcom_broadcast_",
        3 => c"hcom_allGather_",
        4 => c"hcom_reduceScatter_",
        5 => c"hcom_reduce_",
        6 => c"hcom_alltoall_",
        7 => c"hcom_alltoallv_",
        8 => c"hccl_barrier_",
        9 => c"hcom_scatter_",
        10 => c"hcom_send_",
        11 => c"hcom_receive_",
        12 => c"hcom_batchSendRecv_",
        _ => c"hcom_invalid_",
    }
}

/// Kernel task types as CANN's runtime registers them for profiling (MSPTI keeps the ones that
/// start with `KERNEL`).
pub const KERNEL_AICORE: &CStr = c"KERNEL_AICORE";
pub const KERNEL_AIVEC: &CStr = c"KERNEL_AIVEC";
pub const KERNEL_MIX_AIC: &CStr = c"KERNEL_MIX_AIC";
pub const KERNEL_MIX_AIV: &CStr = c"KERNEL_MIX_AIV";
pub const KERNEL_AICPU: &CStr = c"KERNEL_AICPU";

/// The task type of a kernel by its name, as an Atlas A2 device runs them: matrix (cube) kernels
/// on the AI Core, fused attention as a mixed cube+vector task, fused vector kernels with a cube
/// part as mixed vector tasks, AI CPU kernels on the AI CPU, everything else on the vector cores.
pub fn kernel_type(name: &CStr) -> &'static CStr {
    let n = name.to_bytes();
    let has = |s: &[u8]| n.windows(s.len()).any(|w| w.eq_ignore_ascii_case(s));
    if has(b"FlashAttention") || has(b"MatmulAllReduce") {
        KERNEL_MIX_AIC
    } else if has(b"GroupedMatmul") || has(b"RmsNormGrad") {
        KERNEL_MIX_AIV
    } else if has(b"MatMul") || has(b"BatchMatMul") || has(b"Conv") {
        KERNEL_AICORE
    } else if has(b"AiCpu") || has(b"Aicpu") {
        KERNEL_AICPU
    } else {
        KERNEL_AIVEC
    }
}

/// The task types `kernel_type` chooses from, by index (the kernel-type cache stores the index).
const KERNEL_TYPES: [&CStr; 5] = [KERNEL_AICORE, KERNEL_AIVEC, KERNEL_MIX_AIC, KERNEL_MIX_AIV, KERNEL_AICPU];

/// Slots of the kernel-type cache (a power of two): many more than a job's kernel names, so that
/// two of them rarely share one.
const TYPE_SLOTS: usize = 1024;
/// Each slot packs a name's address (shifted left 4) with its type's index + 1; 0 is empty.
/// One word per slot, so a reader never sees one name's address with another's type.
static TYPE_CACHE: [AtomicU64; TYPE_SLOTS] = [const { AtomicU64::new(0) }; TYPE_SLOTS];

/// `kernel_type` of a name that lives for the process, computed once per name rather than per
/// launch: a `&'static CStr` (interned, or a literal) never changes nor moves, so its address
/// identifies its text. A lock-free direct-mapped cache (fork-safe: no lock to inherit held);
/// two names sharing a slot only cost a recomputation.
pub fn kernel_type_static(name: &'static CStr) -> &'static CStr {
    let addr = name.as_ptr() as u64;
    // Addresses fit in 60 bits on every 64-bit target Linux runs user space on; past that, no cache.
    if addr >> 60 != 0 {
        return kernel_type(name);
    }
    // Fibonacci hashing: the product's top bits depend on every bit of the address.
    let slot = &TYPE_CACHE[(addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % TYPE_SLOTS];
    let v = slot.load(Ordering::Relaxed);
    if v >> 4 == addr && v & 0xf != 0 {
        return KERNEL_TYPES[(v & 0xf) as usize - 1];
    }
    let t = kernel_type(name);
    let i = KERNEL_TYPES.iter().position(|k| k.as_ptr() == t.as_ptr()).expect("a type of KERNEL_TYPES");
    slot.store((addr << 4) | (i as u64 + 1), Ordering::Relaxed);
    t
}

/// Bytes per element of an `HcclDataType` (the same numbering as `msptiCommunicationDataType`,
/// which MSPTI copies from HCCL's op info); None for a value HCCL does not define.
pub fn data_type_bytes(data_type: u32) -> Option<u64> {
    Some(match data_type {
        0 | 7 | 14..=17 => 1, // INT8, UINT8, HIF8, FP8E4M3, FP8E5M2, FP8E8M0
        1 | 3 | 8 | 11 => 2,  // INT16, FP16, UINT16, BFP16
        2 | 4 | 9 => 4,       // INT32, FP32, UINT32
        5 | 6 | 10 => 8,      // INT64, UINT64, FP64
        12 => 16,             // INT128
        _ => return None,
    })
}

/// Devices of one Atlas A2 server: HCCL's level-0 (intra-server) algorithm spans them.
const DEVICES_PER_SERVER: u32 = 8;

/// The algorithm HCCL reports for a collective ("-"-separated, one name per level it uses): within
/// one server the devices are fully meshed (`MESH`); across servers HCCL picks by op, server count
/// and message size: pairwise exchange for all-to-all, pipelining for large messages, halving-
/// doubling for a power-of-two number of servers, the nonuniform hierarchical ring otherwise.
pub fn alg_type(hccl_cbid: u32, ranks: u32, bytes: u64) -> &'static CStr {
    let servers = ranks.max(1).div_ceil(DEVICES_PER_SERVER);
    if servers == 1 {
        return c"MESH";
    }
    if matches!(hccl_cbid, 6 | 7) {
        c"MESH-PAIRWISE"
    } else if bytes >= 32 << 20 {
        c"MESH-PIPELINE"
    } else if servers.is_power_of_two() {
        c"MESH-HD"
    } else {
        c"MESH-NHR"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_types_and_algorithms_follow_cann() {
        assert_eq!(comm_op_name(1), c"hcom_allReduce_");
        assert_eq!(comm_op_name(11), c"hcom_receive_");
        assert_eq!(kernel_type(c"MatMulV2"), KERNEL_AICORE);
        assert_eq!(kernel_type(c"FlashAttentionScore"), KERNEL_MIX_AIC);
        assert_eq!(kernel_type(c"Add"), KERNEL_AIVEC);
        assert_eq!(
            kernel_type(c"Axpy_233851a3505389e43928a8bba133a74d_high_performance_210000000"),
            KERNEL_AIVEC
        );
        for n in [c"MatMulV2", c"FlashAttentionScore", c"Add", c"GroupedMatmul", c"aicpu_Cast"] {
            // Twice: the first computes and caches, the second reads the cache.
            assert_eq!(kernel_type_static(n), kernel_type(n));
            assert_eq!(kernel_type_static(n), kernel_type(n));
        }
        assert_eq!((data_type_bytes(11), data_type_bytes(4), data_type_bytes(13)), (Some(2), Some(4), None));
        assert_eq!(alg_type(1, 8, 1 << 20), c"MESH");
        assert_eq!(alg_type(1, 16, 1 << 20), c"MESH-HD");
        assert_eq!(alg_type(1, 24, 1 << 20), c"MESH-NHR");
        assert_eq!(alg_type(1, 32, 64 << 20), c"MESH-PIPELINE");
        assert_eq!(alg_type(7, 32, 1 << 20), c"MESH-PAIRWISE");
    }
}
