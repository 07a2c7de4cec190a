//! The ground floor: the process's state and its fork handling, which the model reads and
//! changes and which knows nothing of it. `locks` lists every lock the fork handlers hold.

pub mod clock;
pub mod era;
#[cfg(test)]
pub mod forktest;
pub mod ids;
pub mod intern;
pub mod locks;
pub mod padded;
pub mod process;
pub mod state;
