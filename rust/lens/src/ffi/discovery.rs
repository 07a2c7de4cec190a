//! Where an MSPTI library is looked for, in one order (the CANN paths are in docs/reference.md,
//! "LD_PRELOAD and error 6"): an explicit path,
//! `MSPTI_LIBRARY`, a libmspti already mapped (LD_PRELOAD), the CANN locations, then the bundled
//! simulator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::symbols::{self, same_file, MsptiLibrary, Origin};
use crate::error::{Error, Result};

/// Open the library at `path`, found by way of `origin`: a clear error when there is no file,
/// and a refusal when another libmspti is already mapped (a second instance would never be
/// called by the runtime).
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
    if let Some(mapped) = mapped_libmspti() {
        if !same_file(&mapped, path) {
            return Err(Error::SecondInstance {
                mapped: mapped.display().to_string(),
                requested: path.display().to_string(),
            });
        }
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

/// The places searched, in order, as (how a library found there is labelled, where): the one
/// definition of the discovery order; `search` follows it, `doctor` and the docs print it.
pub const SEARCH_ORDER: [(Origin, &str); 5] = [
    (Origin::Explicit, "the path given (Session(library=...), --library)"),
    (Origin::Environment, "the MSPTI_LIBRARY environment variable"),
    (Origin::Preloaded, "a libmspti.so already mapped in the process (LD_PRELOAD)"),
    (
        Origin::Cann,
        "the CANN locations: $ASCEND_HOME_PATH and $ASCEND_TOOLKIT_HOME (lib64/, tools/mspti/lib64/), \
         /usr/local/Ascend/cann/lib64, /usr/local/Ascend/ascend-toolkit/latest/lib64",
    ),
    (Origin::Simulator, "the bundled simulator (when the caller offers it)"),
];

/// What the search chose, before anything is opened, and what it passed over.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Search {
    /// The library to open and how it was found. An explicit path or MSPTI_LIBRARY is chosen
    /// even when no file is there: opening it then fails with a clear error, it never falls
    /// through to another library.
    pub found: Option<(PathBuf, Origin)>,
    /// The places passed over, for messages.
    pub tried: Vec<String>,
}

/// Follow `SEARCH_ORDER`: the explicit path, `MSPTI_LIBRARY`, a libmspti already mapped, the
/// first CANN location that exists, then `simulator` (if given and present).
pub fn search(explicit: Option<&Path>, simulator: Option<&Path>) -> Search {
    let mut tried = Vec::new();
    let found = |p: PathBuf, o: Origin, tried: Vec<String>| Search { found: Some((p, o)), tried };
    if let Some(p) = explicit {
        let is_sim = simulator.is_some_and(|s| s.canonicalize().ok() == p.canonicalize().ok());
        return found(p.to_path_buf(), if is_sim { Origin::Simulator } else { Origin::Explicit }, tried);
    }
    if let Ok(p) = std::env::var("MSPTI_LIBRARY") {
        if !p.is_empty() {
            return found(PathBuf::from(p), Origin::Environment, tried);
        }
    }
    match mapped_libmspti() {
        Some(p) => return found(p, Origin::Preloaded, tried),
        None => tried.push("no libmspti.so mapped in this process".to_owned()),
    }
    for c in cann_candidates() {
        if c.exists() {
            return found(c, Origin::Cann, tried);
        }
        tried.push(c.display().to_string());
    }
    if let Some(s) = simulator {
        if s.exists() {
            return found(s.to_path_buf(), Origin::Simulator, tried);
        }
        tried.push(format!("{} (bundled simulator)", s.display()));
    }
    Search { found: None, tried }
}

/// Find and open a library in `SEARCH_ORDER`.
pub fn discover(explicit: Option<&Path>, simulator: Option<&Path>) -> Result<Arc<MsptiLibrary>> {
    let s = search(explicit, simulator);
    match s.found {
        Some((p, origin)) => open(&p, origin),
        None => Err(Error::LibraryNotFound { tried: s.tried.join(", "), hint: hint_not_found() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_order_lists_every_origin_once() {
        let origins: Vec<_> = SEARCH_ORDER.iter().map(|(o, _)| *o).collect();
        assert_eq!(
            origins,
            [Origin::Explicit, Origin::Environment, Origin::Preloaded, Origin::Cann, Origin::Simulator]
        );
    }

    #[test]
    fn an_explicit_path_is_chosen_even_when_missing_and_the_simulator_is_recognised() {
        let missing = Path::new("/nonexistent/libmspti.so");
        let s = search(Some(missing), None);
        assert_eq!(s.found, Some((missing.to_path_buf(), Origin::Explicit)));
        let me = std::env::current_exe().unwrap();
        let s = search(Some(&me), Some(&me));
        assert_eq!(s.found, Some((me.clone(), Origin::Simulator)));
    }
}
