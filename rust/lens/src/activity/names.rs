//! Interned strings of activity records. Records carry `char*` into MSPTI's name caches, which
//! live for the process (mspti activity reference §1.4, §2.1), so a name is looked up by its
//! address first and checked against its first bytes: a reused address with another string
//! becomes a new name, never a wrong one.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for the drain's small integer keys (ids, addresses): one multiply per word
/// (FxHash's), instead of SipHash's DoS resistance, which keys we make ourselves do not need.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// COMMUNICATION records' `dataType` by name (`msptiCommunicationDataType`, in its order of
/// values; 13 is unassigned): the device event log's `data_type` column.
const DATA_TYPES: [(u32, &str); 17] = [
    (0, "int8"),
    (1, "int16"),
    (2, "int32"),
    (3, "fp16"),
    (4, "fp32"),
    (5, "int64"),
    (6, "uint64"),
    (7, "uint8"),
    (8, "uint16"),
    (9, "uint32"),
    (10, "fp64"),
    (11, "bfp16"),
    (12, "int128"),
    (14, "hif8"),
    (15, "fp8e4m3"),
    (16, "fp8e5m2"),
    (17, "fp8e8m0"),
];
const UNKNOWN_TYPE: &str = "unknown:";

/// A data type's name; an unknown value is `unknown:N`, so it survives a round trip.
pub fn data_type_name(t: u32) -> std::borrow::Cow<'static, str> {
    match DATA_TYPES.iter().find(|(v, _)| *v == t) {
        Some((_, n)) => std::borrow::Cow::Borrowed(n),
        None => std::borrow::Cow::Owned(format!("{UNKNOWN_TYPE}{t}")),
    }
}

/// The value of a name `data_type_name` gave, if it is one.
pub fn data_type_of(name: &str) -> Option<u32> {
    DATA_TYPES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(v, _)| *v)
        .or_else(|| name.strip_prefix(UNKNOWN_TYPE)?.parse().ok())
}

/// Entries of the per-buffer memo of name addresses.
const MEMO: usize = 256;

/// Longest name kept (longer ones are cut; kernel names can be long mangled C++).
pub const MAX_NAME: usize = 1024;
/// Distinct names kept; later ones become `OTHER`.
pub const MAX_NAMES: usize = 1 << 16;
pub const EMPTY: u32 = 0;
pub const OTHER: u32 = 1;
/// The row that collects keys beyond a table's cap.
pub const OTHER_NAME: &str = "(other)";
const PREFIX: usize = 16;

pub struct Names {
    by_ptr: FastMap<usize, (u32, [u8; PREFIX])>,
    /// Addresses already checked in the current buffer (cleared per buffer by `new_buffer`), so
    /// a name costs one checked lookup per buffer and a compare per record after that.
    memo: [(usize, u32); MEMO],
    by_str: HashMap<String, u32>,
    strings: Vec<String>,
    /// Names that arrived after the table was full (counted, mapped to OTHER).
    pub overflow: u64,
    /// Pointers that cannot be a string (NULL aside): small values or non-canonical addresses.
    pub bad_pointers: u64,
}

impl Default for Names {
    fn default() -> Names {
        let mut n = Names {
            by_ptr: FastMap::default(),
            memo: [(0, 0); MEMO],
            by_str: HashMap::new(),
            strings: Vec::new(),
            overflow: 0,
            bad_pointers: 0,
        };
        n.intern("");
        n.intern(OTHER_NAME);
        n
    }
}

/// Whether an address can point at user memory on LP64 Linux (x86-64 and aarch64 with 48-bit VAs).
fn plausible(p: usize) -> bool {
    p >= 4096 && (p as u64) < (1u64 << 47)
}

/// The first bytes of the string at `p` (up to its NUL) and how many there are.
///
/// # Safety
/// `p` points at a NUL-terminated string.
unsafe fn prefix(p: usize) -> ([u8; PREFIX], usize) {
    let mut a = [0u8; PREFIX];
    let mut n = 0;
    while n < PREFIX {
        // SAFETY: the caller's contract; we stop at the NUL.
        let b = unsafe { *(p as *const u8).add(n) };
        if b == 0 {
            break;
        }
        a[n] = b;
        n += 1;
    }
    (a, n)
}

impl Names {
    /// A new buffer: names are checked against their bytes again (an address MSPTI reused for
    /// another string between buffers becomes a new name).
    pub fn new_buffer(&mut self) {
        self.memo = [(0, 0); MEMO];
    }

    pub fn get(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", String::as_str)
    }

    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.by_str.get(s) {
            return i;
        }
        if self.strings.len() >= MAX_NAMES {
            self.overflow += 1;
            return OTHER;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.by_str.insert(s.to_owned(), i);
        i
    }

    /// The name at a record's string pointer (EMPTY for NULL).
    ///
    /// # Safety
    /// `p` is NULL, implausible, or points at a NUL-terminated string (a field the library
    /// fills).
    pub unsafe fn at(&mut self, p: usize) -> u32 {
        if p == 0 {
            return EMPTY;
        }
        let m = &mut self.memo[(p >> 3) % MEMO];
        if m.0 == p {
            return m.1;
        }
        // SAFETY: the caller's contract.
        let id = unsafe { self.lookup(p) };
        self.memo[(p >> 3) % MEMO] = (p, id);
        id
    }

    /// # Safety
    /// As `at`.
    unsafe fn lookup(&mut self, p: usize) -> u32 {
        if !plausible(p) {
            self.bad_pointers += 1;
            return EMPTY;
        }
        // SAFETY: the caller's contract.
        let (pre, _) = unsafe { prefix(p) };
        if let Some(&(id, seen)) = self.by_ptr.get(&p) {
            if seen == pre {
                return id;
            }
        }
        let mut bytes = Vec::with_capacity(64);
        while bytes.len() < MAX_NAME {
            // SAFETY: as above; we stop at the NUL or at MAX_NAME.
            let b = unsafe { *(p as *const u8).add(bytes.len()) };
            if b == 0 {
                break;
            }
            bytes.push(b);
        }
        let id = self.intern(&String::from_utf8_lossy(&bytes));
        if self.by_ptr.len() < MAX_NAMES * 4 {
            self.by_ptr.insert(p, (id, pre));
        }
        id
    }
}

/// The string value of `"key"` in a flat JSON object (torch_npu's `communication` range
/// messages: {"opName": ..., "groupName": ..., ...}); None if absent or not a string.
pub fn json_string<'a>(text: &'a str, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    let pat = format!("\"{key}\"");
    let at = text.find(&pat)? + pat.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let mut end = None;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => {
                end = Some(i);
                break;
            }
            _ => escaped = false,
        }
    }
    let raw = &rest[..end?];
    if raw.contains('\\') {
        Some(std::borrow::Cow::Owned(raw.replace("\\\"", "\"").replace("\\\\", "\\")))
    } else {
        Some(std::borrow::Cow::Borrowed(raw))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn data_type_names_round_trip_and_unknown_values_keep_their_number() {
        for t in [0, 3, 11, 17, 13, 0xFFFF] {
            assert_eq!(super::data_type_of(&super::data_type_name(t)), Some(t));
        }
        assert_eq!(super::data_type_name(3), "fp16");
        assert_eq!(super::data_type_of("fp17"), None);
    }

    use super::*;

    #[test]
    fn torch_npu_messages_give_group_and_op() {
        let m =
            r#"{"opName": "HcclAllreduce", "groupName": "hccl_world_group", "dataType": "fp32", "count": 4}"#;
        assert_eq!(json_string(m, "opName").as_deref(), Some("HcclAllreduce"));
        assert_eq!(json_string(m, "groupName").as_deref(), Some("hccl_world_group"));
        assert_eq!(json_string(m, "count"), None);
        assert_eq!(json_string("not json", "opName"), None);
        assert_eq!(json_string(r#"{"opName":"a\"b"}"#, "opName").as_deref(), Some("a\"b"));
    }

    #[test]
    fn a_reused_address_with_another_string_is_another_name_in_the_next_buffer() {
        let mut n = Names::default();
        let mut buf = *b"kernel_a\0\0\0\0\0\0\0\0\0\0";
        let p = buf.as_ptr() as usize;
        // SAFETY: buf is NUL-terminated and lives through the calls.
        let a = unsafe { n.at(p) };
        buf[7] = b'b';
        // Within one buffer an address is one name (the memo); the next buffer checks again.
        n.new_buffer();
        // SAFETY: as above.
        let b = unsafe { n.at(buf.as_ptr() as usize) };
        assert_ne!(a, b);
        assert_eq!(n.get(a), "kernel_a");
        assert_eq!(n.get(b), "kernel_b");
        // SAFETY: NULL and implausible pointers are never read.
        assert_eq!(unsafe { n.at(0) }, EMPTY);
        // SAFETY: as above.
        assert_eq!(unsafe { n.at(0xdead_beef_dead_0000) }, EMPTY);
        assert_eq!(n.bad_pointers, 1);
    }
}
