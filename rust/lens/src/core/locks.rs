//! Taking a mutex whose last holder panicked.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `m`, also when a holder panicked (poisoned). Poisoning is ignored on purpose: every
/// mutex of this crate guards state that each update leaves whole (counters, tables, handles and
/// queues changed by single assignments or pushes, re-checked by their readers), and a panic is
/// already caught at the FFI boundary and reported there. Refusing the lock afterwards would only
/// turn that one reported bug into a collector that stops working, or into a second panic where
/// no unwinding is allowed (inside an MSPTI callback).
#[inline]
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_is_still_taken_with_its_value() {
        let m = std::sync::Arc::new(Mutex::new(7));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 8);
    }
}
