//! The one way a symmwin lock is taken: a lock whose holder panicked is taken anyway.
//!
//! Every mutex, read-write lock and condition variable of symmwin guards state that a
//! panicking holder leaves consistent (each critical section either completes its
//! update or never starts it), and a poisoned lock must not turn one panicked thread
//! into a failure of every later call of the process (or a panic across the C ABI).

use std::sync::LockResult;

/// The guard of a lock result, poisoned or not: `m.lock().recover()`,
/// `rw.read().recover()`, `cv.wait(guard).recover()`.
pub trait Recover<G> {
    /// The guard (or guard and timeout result), whether or not a holder panicked.
    fn recover(self) -> G;
}

impl<G> Recover<G> for LockResult<G> {
    #[inline]
    fn recover(self) -> G {
        self.unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_lock_whose_holder_panicked_is_taken_with_its_last_value() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let mut guard = held.lock().unwrap();
            *guard = 2;
            panic!("the holder panics while it holds the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock().recover(), 2);
    }
}
