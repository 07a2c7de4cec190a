//! When each id was last toggled (enabled or disabled while recording). A pairing that spans a
//! toggle of its id or domain is discarded and counted as `toggled`: its ENTER may be an earlier
//! call's, whose EXIT was never delivered.
//!
//! The generation of toggles is a field of the run word (windows.rs), which the callback loads
//! anyway: an ENTER keeps it, and an EXIT that sees the same generation pairs at once. Only when
//! some toggle happened in between does the EXIT read this table, for its own id.

use std::sync::atomic::{AtomicU32, Ordering};

/// Domains and ids whose toggles are tracked (MSPTI's domains are 1 and 2, ids below 64); other
/// ids cannot be enabled.
const DOMAINS: usize = 3;
const IDS: usize = 64;

/// Per (domain, cbid), the generation of its last toggle.
static LAST: [[AtomicU32; IDS]; DOMAINS] = [const { [const { AtomicU32::new(0) }; IDS] }; DOMAINS];

/// Note a toggle in generation `generation` of (domain, cbid), or of every id of the domain.
/// Called after the run word's generation moved to it and before the enable call reaches MSPTI.
pub fn mark(domain: u32, cbid: Option<u32>, generation: u32) {
    let Some(d) = LAST.get(domain as usize) else { return };
    match cbid {
        Some(c) => {
            if let Some(g) = d.get(c as usize) {
                // Release pairs with `since`'s Acquire: a callback that MSPTI delivers because of
                // this toggle (MSPTI's own enable word orders it after the call) sees it.
                g.store(generation, Ordering::Release);
            }
        }
        None => d.iter().for_each(|g| g.store(generation, Ordering::Release)),
    }
}

/// Whether (domain, cbid) was toggled after generation `since` (generations wrap: compared as a
/// signed difference).
#[cold]
pub fn since(domain: u32, cbid: u32, since: u32) -> bool {
    match LAST.get(domain as usize).and_then(|d| d.get(cbid as usize)) {
        Some(g) => (g.load(Ordering::Acquire).wrapping_sub(since) as i32) > 0,
        None => false,
    }
}
