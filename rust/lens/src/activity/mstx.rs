//! MSTX (`libms_tools_ext.so`, upstream ms_tools_ext.h) bound at run time: marks and ranges that MSPTI
//! turns into MARKER records. Search order: `MSTX_LIBRARY`, a libms_tools_ext.so already mapped,
//! the CANN locations, then an MSPTI library that exports the MSTX symbols itself (the
//! simulator: one file stands in for both).

use std::ffi::{c_char, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::core::locks::lock;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

pub type FnMark = unsafe extern "C" fn(*const c_char, *mut c_void);
pub type FnRangeStart = unsafe extern "C" fn(*const c_char, *mut c_void) -> u64;
pub type FnRangeEnd = unsafe extern "C" fn(u64);
pub type FnDomainCreate = unsafe extern "C" fn(*const c_char) -> *mut c_void;
pub type FnDomainDestroy = unsafe extern "C" fn(*mut c_void);
pub type FnDomainMark = unsafe extern "C" fn(*mut c_void, *const c_char, *mut c_void);
pub type FnDomainRangeStart = unsafe extern "C" fn(*mut c_void, *const c_char, *mut c_void) -> u64;
pub type FnDomainRangeEnd = unsafe extern "C" fn(*mut c_void, u64);

/// MSPTI rejects messages of 255 bytes or more.
pub const MAX_MESSAGE: usize = 254;

#[derive(Clone, Copy)]
pub struct Mstx {
    pub mark: FnMark,
    pub range_start: FnRangeStart,
    pub range_end: FnRangeEnd,
    pub domain_create: Option<FnDomainCreate>,
    pub domain_destroy: Option<FnDomainDestroy>,
    pub domain_mark: Option<FnDomainMark>,
    pub domain_range_start: Option<FnDomainRangeStart>,
    pub domain_range_end: Option<FnDomainRangeEnd>,
}

/// The bound functions, where from, and whether they came from a session's library.
static FOUND: Mutex<Option<(Mstx, PathBuf, bool)>> = Mutex::new(None);
static CANDIDATES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Offer an MSPTI library that may export MSTX too (the session's library). If it does, and
/// MSTX was not bound from a real libms_tools_ext.so, marks follow this library from now on (a
/// stand-in session after a simulator session marks into the stand-in).
pub fn offer(path: &Path) {
    lock(&CANDIDATES).push(path.to_path_buf());
    let mut f = lock(&FOUND);
    if f.as_ref().is_none_or(|(_, p, offered)| *offered && p != path) {
        if let Some(m) = open(path) {
            *f = Some((m, path.to_path_buf(), true));
        }
    }
}

fn open(path: &Path) -> Option<Mstx> {
    if !path.exists() {
        return None;
    }
    // SAFETY: loading a library runs its initialisers; libms_tools_ext is CANN's own library
    // (or our simulator). Never unloaded: its functions are kept.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.ok()?;
    let lib: &'static Library = Box::leak(Box::new(lib));
    macro_rules! sym {
        ($name:literal, $ty:ty) => {
            // SAFETY: the MSTX symbol has this C type (ms_tools_ext.h).
            unsafe { lib.get::<$ty>($name.as_bytes()) }.ok().map(|s| *s)
        };
    }
    Some(Mstx {
        mark: sym!("mstxMarkA", FnMark)?,
        range_start: sym!("mstxRangeStartA", FnRangeStart)?,
        range_end: sym!("mstxRangeEnd", FnRangeEnd)?,
        domain_create: sym!("mstxDomainCreateA", FnDomainCreate),
        domain_destroy: sym!("mstxDomainDestroy", FnDomainDestroy),
        domain_mark: sym!("mstxDomainMarkA", FnDomainMark),
        domain_range_start: sym!("mstxDomainRangeStartA", FnDomainRangeStart),
        domain_range_end: sym!("mstxDomainRangeEnd", FnDomainRangeEnd),
    })
}

/// The places searched, in order.
pub fn candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("MSTX_LIBRARY") {
        if !p.is_empty() {
            v.push(PathBuf::from(p));
        }
    }
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        if let Some(p) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.ends_with("/libms_tools_ext.so"))
        {
            v.push(PathBuf::from(p));
        }
    }
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Ok(root) = std::env::var(var) {
            if !root.is_empty() {
                v.push(Path::new(&root).join("lib64/libms_tools_ext.so"));
                v.push(Path::new(&root).join("tools/mstx/lib64/libms_tools_ext.so"));
            }
        }
    }
    v.push(PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest/lib64/libms_tools_ext.so"));
    v.extend(lock(&CANDIDATES).iter().cloned());
    v
}

/// No MSTX library was found: the places tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotFound {
    pub tried: Vec<PathBuf>,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no MSTX library (libms_tools_ext.so) was found; tried {}. On an Ascend machine run `source \
             <CANN>/set_env.sh` or set MSTX_LIBRARY; without one, open a Session(library=\"sim\") first",
            self.tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    }
}

impl std::error::Error for NotFound {}

/// A message MSTX cannot take: it holds a NUL character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InnerNul;

impl fmt::Display for InnerNul {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an MSTX message cannot contain a NUL character")
    }
}

impl std::error::Error for InnerNul {}

/// The bound MSTX functions and where they came from (searched once found).
///
/// # Errors
/// `NotFound`, naming what was tried and the fix.
pub fn functions() -> Result<Mstx, NotFound> {
    let mut f = lock(&FOUND);
    if let Some((m, _, _)) = f.as_ref() {
        return Ok(*m);
    }
    let offered = lock(&CANDIDATES).clone();
    let tried = candidates();
    for p in &tried {
        if let Some(m) = open(p) {
            *f = Some((m, p.clone(), offered.contains(p)));
            return Ok(m);
        }
    }
    Err(NotFound { tried })
}

/// Where MSTX was found, once it was.
pub fn library() -> Option<PathBuf> {
    lock(&FOUND).as_ref().map(|(_, p, _)| p.clone())
}

/// A message as MSTX takes it: NUL-terminated, cut to MAX_MESSAGE bytes (at a char boundary),
/// inner NULs refused.
///
/// # Errors
/// `InnerNul` for a message with a NUL character.
pub fn message(s: &str) -> Result<std::ffi::CString, InnerNul> {
    let mut end = s.len().min(MAX_MESSAGE);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    std::ffi::CString::new(&s[..end]).map_err(|_| InnerNul)
}
