//! Builds the simulator (rust/sim, a cdylib) for the same target as this crate, so that every way of
//! building the extension ships the simulator beside it: `maturin develop`, `pip install .`, an sdist,
//! `pip install git+...` and cross-built wheels.
//!
//! maturin builds one cdylib per package, so the simulator is built here by a nested `cargo build`
//! with its own target directory and the outer build's target triple. That directory is
//! `sim-HASH/` beside the outer build's `build/` (target/[TRIPLE/]PROFILE/sim-HASH, HASH of the
//! source tree): one per tree, target and profile, shared by every feature set and by check, build
//! and test (clippy, `cargo test`, `make dev` and memcheck reuse one simulator build), and no lock
//! is shared with the outer build. Then:
//! - `MSPTI_SIM_LIBRARY` (compile-time env) names this build's copy of it, for Rust tests that
//!   dlopen it (`cargo test` needs no separate simulator build, for the host or a cross target);
//! - with the `python` feature (maturin turns it on) the file is copied to the package's bundled
//!   path, where maturin picks it up (pyproject.toml `include`) after this crate is compiled.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The bundled simulator's place in the Python package (relative to the repository root).
const BUNDLED: &str = "python/mspti_lens/sim/libmspti_sim.so";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let sim_dir = root.join("rust/sim");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = env::var("TARGET").expect("cargo sets TARGET");
    for p in ["rust/sim/src", "rust/sim/Cargo.toml", "rust/abi/src", "rust/abi/Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }

    let target_dir = nested_target_dir(&out, &root);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "-p", "mspti-sim", "--target", &target, "--manifest-path"])
        .arg(sim_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // Clippy's driver wraps the outer build's workspace crates; the nested build needs rustc.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    // Share the outer build's job slots instead of starting a second set on top of them.
    if let Some(flags) = env::var_os("CARGO_MAKEFLAGS") {
        cmd.env("MAKEFLAGS", flags);
    }
    let status = cmd.status().expect("could not run cargo to build the simulator (rust/sim)");
    assert!(status.success(), "building the simulator (rust/sim) for {target} failed: {status}");

    let built = target_dir.join(&target).join("release/libmspti_sim.so");
    assert!(built.is_file(), "the simulator build produced no {}", built.display());
    // This build's own copy is what its tests load and its package ships: a later build of
    // another feature set may replace the shared file while this one's tests still run.
    let own = out.join("libmspti_sim.so");
    install(&built, &own);
    println!("cargo:rustc-env=MSPTI_SIM_LIBRARY={}", own.display());

    // Only in a tree that has the Python package (the repository, an sdist), not a lone crate.
    let package = root.join("python/mspti_lens");
    if env::var_os("CARGO_FEATURE_PYTHON").is_some() && package.is_dir() {
        install(&own, &root.join(BUNDLED));
    }
}

/// Copy, then rename over the old file: processes that have the old one mapped keep it intact.
/// This runs when the simulator's sources change, not on every build: a cross build in the same
/// tree replaces the host's copy, so `make wheels` builds each wheel from an unpacked sdist.
fn install(from: &Path, to: &Path) {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    }
    let tmp = to.with_extension("so.tmp");
    fs::copy(from, &tmp).unwrap_or_else(|e| panic!("copying the simulator to {}: {e}", tmp.display()));
    fs::rename(&tmp, to).unwrap_or_else(|e| panic!("installing the simulator at {}: {e}", to.display()));
}

/// `sim-HASH/` beside `build/` when OUT_DIR has cargo's layout (PROFILE/build/PACKAGE-HASH/out),
/// else a directory under OUT_DIR (a build of its own). HASH names the source tree, so that an
/// sdist or a clone built with the same target directory never replaces this tree's simulator.
fn nested_target_dir(out: &Path, root: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf()).hash(&mut h);
    match out.ancestors().nth(2) {
        Some(build) if build.file_name().is_some_and(|n| n == "build") => {
            build.with_file_name(format!("sim-{:016x}", h.finish()))
        }
        _ => out.join("sim-target"),
    }
}
