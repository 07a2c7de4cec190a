//! The C face: every function a C caller enters (the exported symbols of `libmspti.so`,
//! `libms_tools_ext.so`, the interposed runtime functions and the simulator's `msim*`
//! functions), and nothing else. Each converts its C arguments and calls the model.
//!
//! | file | what it exports |
//! |---|---|
//! | `mspti` | the MSPTI callback API, `msptiGetVersion`, `msptiGetTimestamp`, `msptiGetResultString` |
//! | `activity` | the MSPTI Activity API (`msptiActivity*`) |
//! | `mstx` | MSTX (`mstx*`) |
//! | `interposed` | the ACL runtime and HCCL functions MSPTI interposes (`aclrt*`, `Hccl*`) |
//! | `runtime` | what the simulated CANN tree's runtime libraries call (`msimHostWork`, ...) |
//! | `calls` | single simulated calls (`msimCall`, `msim_aclrtLaunchKernel`, `msimLaunch`, ...) |
//! | `jobs` | workloads, trace replay and multi-process jobs (`msimWorkloadStart`, ...) |
//! | `control` | the simulator's modes, faults, counters, device model and reset (`msimSet*`, ...) |
//!
//! `args` holds the C face's argument conversions.

pub mod activity;
mod args;
pub mod calls;
pub mod control;
pub mod interposed;
pub mod jobs;
pub mod mspti;
pub mod mstx;
pub mod runtime;
