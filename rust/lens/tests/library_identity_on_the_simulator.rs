//! A libmspti already mapped (as LD_PRELOAD maps it) and a Session naming another copy: never a
//! silent second instance. Copies of the simulator named libmspti.so stand in for CANN's. Its own
//! test binary, so the mapped copy affects no other test.

use std::path::PathBuf;

use _native::ffi::discovery;
use _native::ffi::symbols::Origin;
use _native::Error;

/// The simulator cdylib this crate's build script built for the same target.
fn sim_path() -> PathBuf {
    PathBuf::from(env!("MSPTI_SIM_LIBRARY"))
}

#[test]
fn a_copy_at_another_path_is_refused_naming_both_and_the_same_file_is_accepted_on_the_simulator() {
    let dir = std::env::temp_dir().join(format!("mspti-lens-identity-{}", std::process::id()));
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (mapped, copy) = (a.join("libmspti.so"), b.join("libmspti.so"));
    std::fs::copy(sim_path(), &mapped).unwrap();
    std::fs::copy(sim_path(), &copy).unwrap();
    // Map it the way LD_PRELOAD does (global, before anything else asks).
    // SAFETY: the simulator's initialisers only set up static state.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(&mapped),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .unwrap();
    std::mem::forget(lib);
    assert_eq!(discovery::mapped_libmspti(), Some(mapped.canonicalize().unwrap()));

    // Another file with the same basename: refused, with both paths in the sentence.
    let err = discovery::discover(Some(&copy), None).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::SecondInstance { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains(&copy.display().to_string()), "{text}");
    assert!(text.contains(&mapped.canonicalize().unwrap().display().to_string()), "{text}");

    // The mapped file itself, by its path, a symlink or a hard link: the same library.
    let link = dir.join("link.so");
    std::os::unix::fs::symlink(&mapped, &link).unwrap();
    let hard = a.join("hard.so");
    std::fs::hard_link(&mapped, &hard).unwrap();
    for p in [&mapped, &link, &hard] {
        let l = discovery::open(p, Origin::Explicit).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(l.simulated);
    }
    // With no path given, the mapped one is found first.
    assert_eq!(discovery::discover(None, None).unwrap().path, mapped.canonicalize().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
