//! mspti-sim: a stand-in `libmspti.so` with a simulated ACL runtime and HCCL.
//!
//! It exports the real MSPTI callback-API symbols with the real C ABI and the subscriber rules of
//! MSPTI 26.x (upstream `csrc/callback/callback_manager.cpp`), so mspti-lens loads it through the same
//! run-time loading path as a real library. Preloaded, it interposes the ACL runtime and HCCL
//! functions as the real libmspti does (`model::interpose`), forwarding to the simulated runtime
//! libraries, which drive the device here; the simulator's own workloads call those same wrappers
//! (`model::workload`). Its single simulated calls have names of their own (`msimCall`,
//! `msim_aclrtLaunchKernel`, ...). The extra symbol `msimVersion` is how a loader can tell this
//! library is simulated.
//!
//! Three floors, each calling only the ones below it (docs/design.md, "The simulator's floors"):
//! `c_face` (every exported function: it converts C arguments and calls the model), `model`
//! (the simulated library, runtime and device) and `ground` (the process's state and its fork
//! handling).

mod c_face;
pub mod ground;
pub mod model;
