//! The model: what a real libmspti, ACL runtime, HCCL and device do, in files that each call only
//! those listed before them (and the ground floor):
//!
//! | file | what it is |
//! |---|---|
//! | `cann` | the text CANN writes into records (op names, task types, data-type sizes, algorithms) |
//! | `models` | latency models of host API time |
//! | `jobs` | background work on simulator threads, polled and joined |
//! | `buffers` | the activity buffers: request, record, hand-over, complete, FlushAll |
//! | `records` | records of host calls, external correlation, marker domains |
//! | `multirank` | the multi-rank meeting of a collective across processes |
//! | `device` | the device: timelines per stream, the channel of pending records, data work |
//! | `mstx` | MSTX marks and ranges |
//! | `apis` | the simulated APIs and the delivery of their callbacks |
//! | `callbacks` | the callback API: subscriber, enable bits |
//! | `call` | one simulated call: correlation id, ENTER, the runtime's work, device work, records, EXIT |
//! | `interpose` | the interposed `aclrt*`/`Hccl*` wrappers and the runtime's services |
//! | `activity` | the Activity API's switches, and the reset |
//! | `workload`, `replay` | programs of the simulated runtime: workloads, trace replay |

pub mod activity;
pub mod apis;
pub mod buffers;
pub mod call;
pub mod callbacks;
pub mod cann;
pub mod device;
pub mod interpose;
pub mod jobs;
pub mod models;
pub mod mstx;
pub mod multirank;
pub mod records;
pub mod replay;
pub mod workload;
