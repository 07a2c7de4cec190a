//! Binding of an MSPTI library: one table of function pointers resolved by name, the
//! same path for a real `libmspti.so` and for the simulator. Libraries are never unloaded: MSPTI
//! may call back late, and the name strings it passed stay in our histograms' keys.

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use mspti_abi::*;

use super::elf::check_elf;
use crate::core::locks::lock;
use crate::error::{Error, Result};

/// Whether two paths name one file: the same canonical path, or the same device and inode (a
/// hard link or a bind mount, which dlopen also treats as one library). Basenames say nothing.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (a.canonicalize(), b.canonicalize()) {
        if x == y {
            return true;
        }
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// How the library was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A path given by the caller.
    Explicit,
    /// The `MSPTI_LIBRARY` environment variable.
    Environment,
    /// Already mapped in the process (LD_PRELOAD or linked).
    Preloaded,
    /// A standard CANN location.
    Cann,
    /// The bundled simulator.
    Simulator,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::Explicit => "explicit",
            Origin::Environment => "MSPTI_LIBRARY",
            Origin::Preloaded => "preloaded",
            Origin::Cann => "CANN",
            Origin::Simulator => "simulator",
        }
    }
}

/// Optional symbols looked up (absent in older releases).
pub const OPTIONAL: [&str; 6] = [
    "msptiGetResultString",
    "msptiGetVersion",
    "msptiGetTimestamp",
    "msptiGetCallbackName",
    "msptiActivityRegisterCallbacks",
    "msptiActivityEnable",
];

type FnSimU32 = unsafe extern "C" fn() -> u32;

pub struct MsptiLibrary {
    pub path: PathBuf,
    pub origin: Origin,
    pub subscribe: FnSubscribe,
    pub unsubscribe: FnUnsubscribe,
    pub enable_callback: FnEnableCallback,
    pub enable_domain: FnEnableDomain,
    pub get_result_string: Option<FnGetResultString>,
    pub get_version: Option<FnGetVersion>,
    pub get_timestamp: Option<FnGetTimestamp>,
    /// Which of `OPTIONAL` exist.
    pub optional_present: Vec<&'static str>,
    /// The simulator exports `msimVersion`; no real library does.
    pub simulated: bool,
    sim_get_fidelity: Option<FnSimU32>,
}

impl MsptiLibrary {
    /// The library's own string for a result code, where it has `msptiGetResultString`.
    pub fn result_string(&self, code: MsptiResult) -> Option<String> {
        let f = self.get_result_string?;
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: `f` is the library's msptiGetResultString; `s` is a valid out pointer.
        let rc = unsafe { f(code, &mut s) };
        if rc != MSPTI_SUCCESS || s.is_null() {
            return None;
        }
        // SAFETY: on success the library points `s` at one of its static NUL-terminated strings.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }

    /// Turn a result code into Ok or a descriptive error.
    pub fn check(&self, function: &'static str, code: MsptiResult) -> Result<()> {
        if code == MSPTI_SUCCESS {
            Ok(())
        } else {
            Err(Error::from_code(function, code, self.result_string(code)))
        }
    }

    pub fn version(&self) -> Option<u32> {
        let f = self.get_version?;
        let mut v = 0u32;
        // SAFETY: `f` is msptiGetVersion; `v` is a valid out pointer.
        (unsafe { f(&mut v) } == MSPTI_SUCCESS).then_some(v)
    }

    /// The simulator's fidelity mode (0 documented, 1 cann26, 2 cann8); None for a real library.
    pub fn sim_fidelity(&self) -> Option<u32> {
        // SAFETY: the simulator's msimGetFidelity takes nothing and returns a u32.
        self.sim_get_fidelity.map(|f| unsafe { f() })
    }

    /// Whether the LD_PRELOAD environment variable names this library's file (the same file, by
    /// path or inode: a copy with the same basename is another library).
    pub fn preloaded_by_env(&self) -> bool {
        let Ok(v) = std::env::var("LD_PRELOAD") else { return false };
        v.split([':', ' ']).any(|p| !p.is_empty() && same_file(Path::new(p), &self.path))
    }
}

/// Every library bound so far (never unloaded).
static BOUND: Mutex<Vec<Arc<MsptiLibrary>>> = Mutex::new(Vec::new());

/// The library already bound from `path`, if any.
pub fn bound(path: &Path) -> Option<Arc<MsptiLibrary>> {
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    lock(&BOUND).iter().find(|l| l.path == canonical).cloned()
}

/// dlopen `path` (an existing file) and resolve the MSPTI entry points; a library already bound
/// is returned again.
pub fn bind(path: &Path, origin: Origin) -> Result<Arc<MsptiLibrary>> {
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(l) = bound(path) {
        return Ok(l);
    }
    check_elf(&canonical).map_err(|reason| Error::NotALibrary {
        path: canonical.display().to_string(),
        reason,
        hint: "Point MSPTI_LIBRARY (or Session(library=...)) at CANN's lib64/libmspti.so for this machine \
               (after `source set_env.sh`)."
            .to_owned(),
    })?;
    // SAFETY: loading a library runs its initialisers; that is the point of binding MSPTI. It is
    // opened RTLD_LOCAL so it never shadows other libraries' symbols. check_elf has ruled out the
    // files dlopen would crash on (truncated segments).
    let lib = unsafe { Library::open(Some(&canonical), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
        Error::NotALibrary {
        path: canonical.display().to_string(),
        reason: e.to_string(),
        hint: "It may be truncated, not an ELF file, or built for another architecture. Point MSPTI_LIBRARY \
               at CANN's lib64/libmspti.so (after `source set_env.sh`)."
            .to_owned(),
    }
    })?;
    // Never unloaded: see the module comment.
    let lib: &'static Library = Box::leak(Box::new(lib));
    let shown = canonical.display().to_string();
    macro_rules! required {
        ($name:literal, $ty:ty) => {{
            // SAFETY: the symbol has this C type in every MSPTI release (docs/reference.md,
            // "Exported functions"); the library is never unloaded, so the pointer stays valid.
            let s = unsafe { lib.get::<$ty>($name.as_bytes()) }
                .map_err(|_| Error::SymbolMissing { path: shown.clone(), symbol: $name })?;
            *s
        }};
    }
    macro_rules! optional {
        ($name:literal, $ty:ty) => {{
            // SAFETY: as above; absent in older releases, hence optional.
            unsafe { lib.get::<$ty>($name.as_bytes()) }.ok().map(|s| *s)
        }};
    }
    let optional_present = OPTIONAL
        .iter()
        .copied()
        // SAFETY: only checks that the symbol exists; it is not called.
        .filter(|n| unsafe { lib.get::<*const ()>(n.as_bytes()) }.is_ok())
        .collect();
    let sim_version: Option<FnSimU32> = optional!("msimVersion", FnSimU32);
    let l = Arc::new(MsptiLibrary {
        path: canonical,
        origin,
        subscribe: required!("msptiSubscribe", FnSubscribe),
        unsubscribe: required!("msptiUnsubscribe", FnUnsubscribe),
        enable_callback: required!("msptiEnableCallback", FnEnableCallback),
        enable_domain: required!("msptiEnableDomain", FnEnableDomain),
        get_result_string: optional!("msptiGetResultString", FnGetResultString),
        get_version: optional!("msptiGetVersion", FnGetVersion),
        get_timestamp: optional!("msptiGetTimestamp", FnGetTimestamp),
        optional_present,
        simulated: sim_version.is_some(),
        sim_get_fidelity: optional!("msimGetFidelity", FnSimU32),
    });
    lock(&BOUND).push(l.clone());
    Ok(l)
}
