//! The ELF check before dlopen: refuse what dlopen cannot load or would crash on, with a reason a
//! person can act on.

use std::path::Path;

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
