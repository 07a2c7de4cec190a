//! Strings that live for the life of the process (kernel, marker, domain and communicator
//! names), as the real library's name caches keep them: records carry bare pointers to them.
//!
//! Lock-free, so a `fork()` child can never inherit it locked: a child of a process whose other
//! thread was interning at the fork has no thread to release a lock, and its next launch would
//! hang. The table is a fixed array of buckets, each a list that only ever grows at its head by
//! compare-and-swap; entries are never removed or freed, so a reader may walk a list while
//! another thread pushes onto it.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

struct Entry {
    key: Box<str>,
    value: CString,
    next: *const Entry,
}

const BUCKETS: usize = 4096;
static TABLE: [AtomicPtr<Entry>; BUCKETS] = [const { AtomicPtr::new(ptr::null_mut()) }; BUCKETS];

/// A multiply-xorshift hash over 8 bytes at a time (a name is hashed on every launch that
/// announces it): stable, cheap, good enough to spread names over the buckets.
fn bucket(b: &[u8]) -> usize {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, w: u64| {
        let h = (h ^ w).wrapping_mul(K);
        h ^ (h >> 29)
    };
    let mut h = K ^ b.len() as u64;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        h = mix(h, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut t = [0u8; 8];
        t[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(t));
    }
    ((h ^ (h >> 32)) as usize) % BUCKETS
}

/// The entry for `s` in the list starting at `head`, stopping at `stop` (exclusive).
fn find(mut at: *const Entry, stop: *const Entry, s: &[u8]) -> Option<&'static CStr> {
    while !at.is_null() && at != stop {
        // SAFETY: entries are leaked when published and never freed or changed afterwards; the
        // Acquire load that produced `at` (or its predecessor's) saw the entry's initialisation.
        let e: &'static Entry = unsafe { &*at };
        if e.key.as_bytes() == s {
            return Some(e.value.as_c_str());
        }
        at = e.next;
    }
    None
}

/// `intern` of a C string's bytes, as `to_string_lossy` reads them (invalid UTF-8 replaced), without
/// a UTF-8 check for a name already interned: keys are valid UTF-8, so bytes equal to one are
/// valid and convert to exactly that key.
pub fn intern_c(s: &CStr) -> &'static CStr {
    let b = s.to_bytes();
    if let Some(v) = find(TABLE[bucket(b)].load(Ordering::Acquire), ptr::null(), b) {
        return v;
    }
    match std::str::from_utf8(b) {
        Ok(s) => intern(s),
        Err(_) => intern(&s.to_string_lossy()),
    }
}

/// The process-lifetime C string for `s` (NUL bytes dropped); equal strings get the same pointer.
pub fn intern(s: &str) -> &'static CStr {
    let slot = &TABLE[bucket(s.as_bytes())];
    let mut head = slot.load(Ordering::Acquire);
    if let Some(v) = find(head, ptr::null(), s.as_bytes()) {
        return v;
    }
    let clean: String = s.chars().filter(|&c| c != '\0').collect();
    let value = CString::new(clean).unwrap_or_default();
    let mut entry = Box::new(Entry { key: s.into(), value, next: head });
    loop {
        let new = ptr::addr_of_mut!(*entry);
        match slot.compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // Published: the entry (and its string) lives for the rest of the process.
                let e: &'static Entry = Box::leak(entry);
                return e.value.as_c_str();
            }
            Err(now) => {
                // Someone pushed first: they may have pushed this very string; then this entry,
                // never published, is freed here.
                if let Some(v) = find(now, head, s.as_bytes()) {
                    return v;
                }
                head = now;
                entry.next = head;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_pointer_across_threads() {
        let names: Vec<String> = (0..2000).map(|i| format!("kernel_{i}")).collect();
        let ptrs: Vec<Vec<usize>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|_| sc.spawn(|| names.iter().map(|n| intern(n).as_ptr() as usize).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for p in &ptrs[1..] {
            assert_eq!(p, &ptrs[0]);
        }
        assert_eq!(intern("kernel_7").to_bytes(), b"kernel_7");
        assert_eq!(intern("a\0b").to_bytes(), b"ab");
        assert_eq!(intern_c(c"kernel_7").as_ptr(), intern("kernel_7").as_ptr());
        let bad = c"k\xffx";
        assert_eq!(intern_c(bad).as_ptr(), intern("k\u{fffd}x").as_ptr());
    }

    /// Children forked while another thread interns new names in a tight loop must be able to
    /// intern themselves. With a mutex, a fork taken while the other thread held it left the child
    /// blocked for ever (53 of 60 children hung here).
    #[test]
    fn forked_children_can_intern_while_another_thread_interns() {
        let (hung, failed) = crate::ground::forktest::hung_children(
            60,
            |i| {
                intern(&format!("spinner_name_{i}"));
            },
            |c| intern(&format!("child_name_{c}")).to_bytes().starts_with(b"child_name_"),
        );
        assert_eq!(
            (hung, failed),
            (0, 0),
            "of 60 forked children, {hung} hung interning a name, {failed} failed"
        );
    }
}
