//! Builds the simulator (rust/sim, a cdylib) for the same target as this crate, so that every way of
//! building the extension ships the simulator beside it: `maturin develop`, `pip install .`, an sdist,
//! `pip install git+...` and cross-built wheels.
//!
//! maturin builds one cdylib per package, so the simulator is built here by a nested `cargo build`
//! with its own target directory and the outer build's target triple. That directory is
//! `sim-HASH/` beside the outer build's profile directories (target/[TRIPLE/]sim-HASH, HASH of the
//! source tree): one per tree and target, shared by every profile and feature set and by check, build
//! and test (clippy, `cargo test`, `make dev` and memcheck reuse one simulator build), and no lock
//! is shared with the outer build. Then:
//! - `MSPTI_SIM_LIBRARY` (compile-time env) names this build's copy of it, for Rust tests that
//!   dlopen it (`cargo test` needs no separate simulator build, for the host or a cross target);
//! - with the `python` feature (maturin turns it on) the file is copied to the package's bundled
//!   path, where maturin picks it up (pyproject.toml `include`) after this crate is compiled.
//!
//! It also builds the simulated CANN tree's runtime libraries (rust/sim/cann/src/*.c: libascendcl.so,
//! libhccl.so, libopapi.so, ...) with the target's C compiler, linked against the simulator under
//! the name `libascend_hal.so`, and puts them and the tree's headers (rust/sim/cann/include) in the
//! package too, so `python -m mspti_lens.sim cann DIR` needs no compiler (docs/simulated_cann.md).
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The bundled simulator's place in the Python package (relative to the repository root).
const BUNDLED: &str = "python/mspti_lens/sim/libmspti_sim.so";
/// Where the simulated CANN tree's libraries and headers go in the package.
const BUNDLED_CANN: &str = "python/mspti_lens/sim/cann_tree";

/// The simulated CANN runtime libraries: file name, C sources (rust/sim/cann/src), libraries of
/// the tree it links (besides libascend_hal.so, the simulator), built before it.
const CANN_LIBS: &[(&str, &[&str], &[&str])] = &[
    ("libc_sec.so", &["c_sec.c"], &[]),
    ("libascendalog.so", &["ascendalog.c"], &[]),
    ("libascendcl.so", &["ascendcl.c"], &["ascendalog"]),
    ("libnnopbase.so", &["nnopbase.c"], &[]),
    ("libopapi.so", &["opapi.c"], &["ascendcl"]),
    ("libhccl.so", &["hccl.c"], &[]),
    ("libms_tools_ext.so", &["ms_tools_ext.c"], &[]),
    ("libmsprofiler.so", &["empty.c"], &[]),
    ("libhcomm.so", &["empty.c"], &[]),
];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let sim_dir = root.join("rust/sim");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = env::var("TARGET").expect("cargo sets TARGET");
    for p in [
        "rust/sim/src",
        "rust/sim/cann",
        "rust/sim/Cargo.toml",
        "rust/abi/src",
        "rust/abi/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }

    // The loom model tests (`--cfg loom`, unit tests of this crate and the simulator's) load no
    // simulator library; building one under loom's cfg would only double that build.
    if env::var_os("CARGO_CFG_LOOM").is_some() {
        return;
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

    let cann = out.join("cann_tree");
    build_cann(&root.join("rust/sim/cann"), &own, &cann, &target);
    println!("cargo:rustc-env=MSPTI_SIM_CANN_TREE={}", cann.display());

    // Only in a tree that has the Python package (the repository, an sdist), not a lone crate.
    let package = root.join("python/mspti_lens");
    if env::var_os("CARGO_FEATURE_PYTHON").is_some() && package.is_dir() {
        install(&own, &root.join(BUNDLED));
        install_tree(&cann, &root.join(BUNDLED_CANN));
    }
}

/// The C compiler for `target`: `CC_<target>` / `TARGET_CC` / `CC` as the cc crate reads them, else
/// `cc` for the host and Debian's cross compiler name for aarch64.
fn c_compiler(target: &str) -> std::ffi::OsString {
    let host = env::var("HOST").unwrap_or_default();
    for var in [format!("CC_{target}"), format!("CC_{}", target.replace('-', "_")), "TARGET_CC".to_owned()] {
        if let Some(cc) = env::var_os(&var) {
            return cc;
        }
    }
    if target == host {
        return env::var_os("CC").unwrap_or_else(|| "cc".into());
    }
    match target.split('-').next() {
        Some("aarch64") => "aarch64-linux-gnu-gcc".into(),
        _ => "cc".into(),
    }
}

/// Compile the simulated CANN runtime libraries into `dest/lib64` and copy the headers into
/// `dest/include`. Each library has its SONAME and finds its neighbours through `$ORIGIN`; the
/// simulator is linked as `libascend_hal.so` (the tree links that name to libmspti.so).
fn build_cann(src: &Path, sim: &Path, dest: &Path, target: &str) {
    let lib64 = dest.join("lib64");
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(&lib64).unwrap_or_else(|e| panic!("creating {}: {e}", lib64.display()));
    let hal_dir = dest.join("hal");
    fs::create_dir_all(&hal_dir).unwrap_or_else(|e| panic!("creating {}: {e}", hal_dir.display()));
    fs::copy(sim, hal_dir.join("libascend_hal.so")).unwrap_or_else(|e| panic!("copying the simulator: {e}"));
    let cc = c_compiler(target);
    let include = src.join("include");
    for (name, sources, links) in CANN_LIBS {
        let mut cmd = Command::new(&cc);
        cmd.args(["-shared", "-fPIC", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(&include)
            .arg("-I")
            .arg(src.join("src"));
        for s in *sources {
            cmd.arg(src.join("src").join(s));
        }
        cmd.arg(format!("-Wl,-soname,{name}"))
            .arg("-Wl,-rpath,$ORIGIN")
            .arg("-Wl,--no-undefined")
            .arg("-L")
            .arg(&lib64)
            .arg("-L")
            .arg(&hal_dir);
        for l in *links {
            cmd.arg(format!("-l{l}"));
        }
        cmd.args(["-lascend_hal", "-ldl", "-lpthread", "-o"]).arg(lib64.join(name));
        let status = cmd.status().unwrap_or_else(|e| {
            panic!("could not run the C compiler {cc:?} for the simulated CANN tree (set CC_{target}): {e}")
        });
        assert!(status.success(), "compiling {name} of the simulated CANN tree failed: {status}");
    }
    copy_dir(&include, &dest.join("include"));
    fs::remove_dir_all(&hal_dir).unwrap_or_else(|e| panic!("removing {}: {e}", hal_dir.display()));
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    for entry in fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display())) {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            fs::copy(&path, to.join(entry.file_name()))
                .unwrap_or_else(|e| panic!("copying {}: {e}", path.display()));
        }
    }
}

/// Replace the package's copy of the tree's files: a new directory beside it, then renames, so a
/// process reading the old copy keeps a whole one.
fn install_tree(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    let old = to.with_extension("old");
    let _ = fs::remove_dir_all(&tmp);
    let _ = fs::remove_dir_all(&old);
    copy_dir(from, &tmp);
    if to.exists() {
        fs::rename(to, &old).unwrap_or_else(|e| panic!("moving {} aside: {e}", to.display()));
    }
    fs::rename(&tmp, to).unwrap_or_else(|e| panic!("installing {}: {e}", to.display()));
    let _ = fs::remove_dir_all(&old);
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

/// `sim-HASH/` beside the profile directories when OUT_DIR has cargo's layout
/// ([TRIPLE/]PROFILE/build/PACKAGE-HASH/out), else a directory under OUT_DIR (a build of its own).
/// The nested build is always `--release`, so every outer profile (release for the extension,
/// test-release for the test binaries) shares one simulator build per tree and target. HASH names
/// the source tree, so that an sdist or a clone built with the same target directory never
/// replaces this tree's simulator.
fn nested_target_dir(out: &Path, root: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf()).hash(&mut h);
    match out.ancestors().nth(2) {
        Some(build) if build.file_name().is_some_and(|n| n == "build") => match build.parent() {
            Some(profile) => profile.with_file_name(format!("sim-{:016x}", h.finish())),
            None => out.join("sim-target"),
        },
        _ => out.join("sim-target"),
    }
}
