//! A value alone on its cache lines, for statics that one thread writes on every record while
//! others read their neighbours on every launch (the linker packs statics tightly: the record
//! lock once shared a line with the enabled kinds and the correlation counter, so each record the
//! channel thread wrote cost the launching thread a cache miss).

use std::ops::Deref;

/// `T` aligned (and so padded) to 128 bytes: two 64-byte lines, as adjacent-line prefetchers
/// fetch pairs of them.
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}
