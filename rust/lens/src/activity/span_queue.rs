//! A thread's launch spans waiting for its API records (`aggregate`): a FIFO on a power-of-two
//! array indexed by a mask. The join reads its first few entries per record; `VecDeque`'s
//! wrap-around arithmetic on every `get` was a fifth of the join's cost. Grows by doubling in
//! the drain thread (never in a callback), up to what the caller bounds it to.

pub struct SpanQueue<T> {
    buf: Vec<T>,
    /// Index of the front entry, unwrapped (the slot is `head & mask`).
    head: usize,
    len: usize,
}

impl<T: Copy + Default> Default for SpanQueue<T> {
    fn default() -> SpanQueue<T> {
        SpanQueue { buf: Vec::new(), head: 0, len: 0 }
    }
}

impl<T: Copy + Default> SpanQueue<T> {
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buf.len().wrapping_sub(1)
    }

    /// The `i`-th entry from the front.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i < self.len {
            self.buf.get(self.head.wrapping_add(i) & self.mask())
        } else {
            None
        }
    }

    #[inline]
    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    #[inline]
    pub fn back(&self) -> Option<&T> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head = self.head.wrapping_add(1);
        self.len -= 1;
        Some(v)
    }

    #[inline]
    pub fn push_back(&mut self, v: T) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let i = self.head.wrapping_add(self.len) & self.mask();
        self.buf[i] = v;
        self.len += 1;
    }

    #[cold]
    fn grow(&mut self) {
        let cap = (self.buf.len() * 2).max(64);
        let mut buf = vec![T::default(); cap];
        for (k, b) in buf.iter_mut().take(self.len).enumerate() {
            *b = self.buf[self.head.wrapping_add(k) & self.mask()];
        }
        self.buf = buf;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::SpanQueue;
    use std::collections::VecDeque;

    #[test]
    fn it_keeps_fifo_order_across_wraps_and_growth_as_a_vecdeque_does() {
        let mut q = SpanQueue::<u64>::default();
        let mut d = VecDeque::new();
        assert_eq!((q.front(), q.back()), (None, None));
        assert_eq!(q.pop_front(), None);
        // Pushes and pops interleaved so the front wraps the array, with growth in between.
        for i in 0..5000u64 {
            q.push_back(i);
            d.push_back(i);
            if i % 3 == 0 {
                assert_eq!(q.pop_front(), d.pop_front());
            }
            if i % 7 == 0 {
                for k in [0, 1, 2, d.len().saturating_sub(1), d.len()] {
                    assert_eq!(q.get(k), d.get(k), "entry {k} after {i}");
                }
                assert_eq!((q.front(), q.back(), q.len()), (d.front(), d.back(), d.len()));
            }
        }
        while let Some(v) = d.pop_front() {
            assert_eq!(q.pop_front(), Some(v));
        }
        assert_eq!(q.len(), 0);
    }
}
