//! Store calls with a deadline that holds whatever the store does.
//!
//! A store is outside our control: a c10d TCPStore whose server is stopped blocks a
//! call for as long as its own socket timeout (minutes), a custom store may block
//! forever. Each call runs on the runtime's worker pool ([`crate::worker`]) while the
//! caller waits at most until its deadline; a call still stuck then is abandoned and
//! later calls run on other threads of the pool.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

/// Run `call` on `store` on a worker; give up at `deadline`. `what` names the
/// operation for the error ("get(symmwin/g/3/req/1)").
pub(crate) fn call<T: Send + 'static>(
    store: &Arc<dyn Store>,
    deadline: Instant,
    phase: Phase,
    what: impl FnOnce() -> String,
    call: impl FnOnce(&dyn Store) -> Result<T> + Send + 'static,
) -> Result<T> {
    call_ticking(store, (deadline, phase), what, call, || {
        symmwin_device::interrupt::check(phase)
    })
}

/// [`call`], calling `tick` at least every 50 ms while it waits: an error from `tick`
/// (an interrupt) ends the wait with it, abandoning the worker as a timeout does.
pub(crate) fn call_ticking<T: Send + 'static>(
    store: &Arc<dyn Store>,
    (deadline, phase): (Instant, Phase),
    what: impl FnOnce() -> String,
    call: impl FnOnce(&dyn Store) -> Result<T> + Send + 'static,
    tick: impl FnMut() -> Result<()>,
) -> Result<T> {
    let store_for_job = Arc::clone(store);
    let started =
        crate::worker::start(move || call(store_for_job.as_ref())).map_err(|e| e.during(phase))?;
    let remaining = deadline.saturating_duration_since(Instant::now());
    match started.wait_ticking(remaining, tick)? {
        Ok(value) => value,
        // The call is abandoned: its thread rejoins the pool if it ever returns.
        Err(RecvTimeoutError::Timeout) => {
            Err(unreachable(store.as_ref(), phase, what(), remaining))
        }
        Err(RecvTimeoutError::Disconnected) => Err(Error::new(
            phase,
            ErrorKind::Store(format!("{} panicked in the store", what())),
        )),
    }
}

fn unreachable(store: &dyn Store, phase: Phase, what: String, waited: Duration) -> Error {
    let host = store
        .describe()
        .map(|d| format!(" ({})", symmwin_device::text::clip(&d)))
        .unwrap_or_default();
    Error::new(
        phase,
        ErrorKind::Store(format!(
            "the store is unreachable{host}: {what} did not return within the {waited:?} \
             left of the rendezvous timeout (is the process hosting the store stopped or \
             cut off?)"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    /// A store whose reads block for `delay`.
    struct Slow {
        delay: Duration,
    }

    impl Store for Slow {
        fn set(&self, _: &str, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn try_get(&self, _: &str) -> Result<Option<Vec<u8>>> {
            std::thread::sleep(self.delay);
            Ok(None)
        }
        fn add(&self, _: &str, _: i64) -> Result<i64> {
            Ok(0)
        }
        fn delete(&self, _: &str) -> Result<()> {
            Ok(())
        }
        fn describe(&self) -> Option<String> {
            Some("served by the test".into())
        }
    }

    #[test]
    fn a_blocking_store_call_returns_at_the_deadline_naming_the_store() {
        let store: Arc<dyn Store> = Arc::new(Slow {
            delay: Duration::from_secs(5),
        });
        let start = Instant::now();
        let err = call(
            &store,
            start + Duration::from_millis(200),
            Phase::Gather,
            || "get(k)".into(),
            |s| s.try_get("k"),
        )
        .unwrap_err()
        .to_string();
        let waited = start.elapsed();
        assert!(waited < Duration::from_millis(400), "{waited:?}");
        assert!(
            err.contains("store is unreachable (served by the test)"),
            "{err}"
        );
        assert!(err.contains("get(k)"), "{err}");
        // A later call still works (a fresh worker) and values come back.
        let good: Arc<dyn Store> = Arc::new(MemoryStore::new());
        good.set("a", b"1").unwrap();
        let value = call(
            &good,
            Instant::now() + Duration::from_secs(5),
            Phase::Gather,
            || "get(a)".into(),
            |s| s.try_get("a"),
        )
        .unwrap();
        assert_eq!(value, Some(b"1".to_vec()));
    }
}
