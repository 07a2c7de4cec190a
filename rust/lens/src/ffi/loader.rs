//! Run-time binding of an MSPTI library: one table of function pointers resolved by name, the
//! same path for a real `libmspti.so` and for the simulator. Libraries are never unloaded: MSPTI
//! may call back late, and the name strings it passed stay in our histograms' keys.

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use mspti_abi::*;

use crate::error::{Error, Result};

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

    /// Whether the LD_PRELOAD environment variable names this library's file.
    pub fn preloaded_by_env(&self) -> bool {
        let Ok(v) = std::env::var("LD_PRELOAD") else { return false };
        let file = self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        v.split([':', ' ']).any(|p| !p.is_empty() && (Path::new(p) == self.path || p.ends_with(&file)))
    }
}

/// dlopen `path` and resolve the MSPTI entry points.
pub fn open(path: &Path, origin: Origin) -> Result<Arc<MsptiLibrary>> {
    static OPENED: Mutex<Vec<Arc<MsptiLibrary>>> = Mutex::new(Vec::new());
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    {
        let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = opened.iter().find(|l| l.path == canonical) {
            return Ok(l.clone());
        }
    }
    if !path.exists() {
        return Err(Error::LibraryNotFound {
            tried: format!("{} ({})", path.display(), origin.name()),
            hint: hint_not_found(),
        });
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
            // SAFETY: the symbol has this C type in every MSPTI release (mspti_abi.md §1a); the
            // library is never unloaded, so the pointer stays valid.
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
    OPENED.lock().unwrap_or_else(|e| e.into_inner()).push(l.clone());
    Ok(l)
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

/// The ELF machine of this build.
const HOST_MACHINE: u16 = if cfg!(target_arch = "x86_64") {
    62
} else if cfg!(target_arch = "aarch64") {
    183
} else {
    0
};

/// Reject what dlopen cannot load or would crash on: not ELF, the wrong class, byte order or
/// architecture, not a shared object, or truncated (glibc maps a PT_LOAD segment that runs past
/// the end of the file and the process dies of SIGBUS).
pub fn check_elf(path: &Path) -> std::result::Result<(), String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let size = data.len() as u64;
    if data.len() < 64 || &data[..4] != b"\x7fELF" {
        return Err("not an ELF file".to_owned());
    }
    if data[4] != 2 || cfg!(target_pointer_width = "32") {
        return Err("not a 64-bit ELF file".to_owned());
    }
    if data[5] != 1 || cfg!(target_endian = "big") {
        return Err("an ELF file of the other byte order".to_owned());
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap_or([0; 8]));
    if u16_at(16) != 3 {
        return Err(format!("an ELF file of type {} (a shared library has type 3, ET_DYN)", u16_at(16)));
    }
    let machine = u16_at(18);
    if HOST_MACHINE != 0 && machine != HOST_MACHINE {
        return Err(format!(
            "built for another architecture (ELF machine {machine}; this process is {} = {HOST_MACHINE})",
            std::env::consts::ARCH
        ));
    }
    let (phoff, phentsize, phnum) = (u64_at(32), u64::from(u16_at(54)), u64::from(u16_at(56)));
    let table_end = phoff.checked_add(phentsize.saturating_mul(phnum));
    if phentsize < 56 || table_end.is_none_or(|e| e > size) {
        return Err(format!("truncated: its program headers lie past the end of the file ({size} bytes)"));
    }
    for i in 0..phnum {
        let at = (phoff + i * phentsize) as usize;
        const PT_LOAD: u32 = 1;
        if u32_at(at) == PT_LOAD {
            let (offset, filesz) = (u64_at(at + 8), u64_at(at + 32));
            if offset.checked_add(filesz).is_none_or(|e| e > size) {
                return Err(format!(
                    "truncated: a loadable segment ends at byte {} but the file has {size}",
                    offset.saturating_add(filesz)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_and_foreign_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("lens-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc =
            maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libc.so")).unwrap();
        let bytes = std::fs::read(libc).unwrap();
        assert_eq!(check_elf(Path::new(libc)), Ok(()));
        let cut = dir.join("cut.so");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        assert!(check_elf(&cut).unwrap_err().contains("truncated"));
        let mut foreign = bytes.clone();
        foreign[18] = 40; // EM_ARM
        let f = dir.join("arm.so");
        std::fs::write(&f, &foreign).unwrap();
        assert!(check_elf(&f).unwrap_err().contains("another architecture"));
        let text = dir.join("text.so");
        std::fs::write(&text, b"hello").unwrap();
        assert_eq!(check_elf(&text).unwrap_err(), "not an ELF file");
        std::fs::remove_dir_all(&dir).ok();
    }
}
