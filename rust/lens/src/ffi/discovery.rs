//! Where an MSPTI library is looked for, in one order (DESIGN.md): an explicit path,
//! `MSPTI_LIBRARY`, a libmspti already mapped (LD_PRELOAD), the CANN locations, then the bundled
//! simulator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::symbols::{self, MsptiLibrary, Origin};
use crate::error::{Error, Result};

/// Open the library at `path`, found by way of `origin`: a clear error when there is no file.
pub fn open(path: &Path, origin: Origin) -> Result<Arc<MsptiLibrary>> {
    if let Some(l) = symbols::bound(path) {
        return Ok(l);
    }
    if !path.exists() {
        return Err(Error::LibraryNotFound {
            tried: format!("{} ({})", path.display(), origin.name()),
            hint: hint_not_found(),
        });
    }
    symbols::bind(path, origin)
}

fn hint_not_found() -> String {
    "On an Ascend machine run `source <CANN>/set_env.sh` (it sets ASCEND_HOME_PATH) or set \
     MSPTI_LIBRARY=/path/to/libmspti.so; without an NPU use Session(library=\"sim\") for the simulator."
        .to_owned()
}

/// A libmspti.so already mapped into this process, from /proc/self/maps.
pub fn mapped_libmspti() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libmspti.so"))
        .map(PathBuf::from)
}

/// The standard CANN places for libmspti.so, in order.
pub fn cann_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Ok(root) = std::env::var(var) {
            if !root.is_empty() {
                v.push(Path::new(&root).join("lib64/libmspti.so"));
                v.push(Path::new(&root).join("tools/mspti/lib64/libmspti.so"));
            }
        }
    }
    v.push(PathBuf::from("/usr/local/Ascend/cann/lib64/libmspti.so"));
    v.push(PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest/lib64/libmspti.so"));
    v
}

/// Find and open a library in the discovery order of DESIGN.md: explicit path, `MSPTI_LIBRARY`,
/// a libmspti already mapped, the CANN locations, then `simulator` (if given).
pub fn discover(explicit: Option<&Path>, simulator: Option<&Path>) -> Result<Arc<MsptiLibrary>> {
    if let Some(p) = explicit {
        let is_sim = simulator.is_some_and(|s| s.canonicalize().ok() == p.canonicalize().ok());
        return open(p, if is_sim { Origin::Simulator } else { Origin::Explicit });
    }
    if let Ok(p) = std::env::var("MSPTI_LIBRARY") {
        if !p.is_empty() {
            return open(Path::new(&p), Origin::Environment);
        }
    }
    let mut tried = Vec::new();
    match mapped_libmspti() {
        Some(p) => return open(&p, Origin::Preloaded),
        None => tried.push("no libmspti.so mapped in this process".to_owned()),
    }
    for c in cann_candidates() {
        if c.exists() {
            return open(&c, Origin::Cann);
        }
        tried.push(c.display().to_string());
    }
    if let Some(s) = simulator {
        if s.exists() {
            return open(s, Origin::Simulator);
        }
        tried.push(format!("{} (bundled simulator)", s.display()));
    }
    Err(Error::LibraryNotFound { tried: tried.join(", "), hint: hint_not_found() })
}
