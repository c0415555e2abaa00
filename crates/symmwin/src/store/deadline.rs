//! Store calls with a deadline that holds whatever the store does.
//!
//! A store is outside our control: a c10d TCPStore whose server is stopped blocks a
//! call for as long as its own socket timeout (minutes), a custom store may block
//! forever. Each call runs on a worker thread while the caller waits at most until
//! its deadline; a worker still stuck then is abandoned (it exits when the call
//! returns, if ever) and later calls get a fresh one. Idle workers are kept for reuse,
//! so a rendezvous costs a thread hop per store phase, not a thread. The same workers
//! run a rendezvous's imports side by side ([`start`]).

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symmwin_device::lock::Recover;

use super::Store;
use symmwin_device::error::{Error, ErrorKind, Phase, Result};

type Job = Box<dyn FnOnce() + Send>;

/// Idle workers, each waiting on its own queue.
static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

fn spawn_worker() -> Result<Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("symmwin-store".into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        })
        .map_err(|e| Error::os(Phase::Publish, "spawn(store worker)", e))?;
    Ok(tx)
}

fn idle_worker() -> Option<Sender<Job>> {
    IDLE.lock().recover().pop()
}

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
    let started = start(move || call(store_for_job.as_ref())).map_err(|e| e.during(phase))?;
    let remaining = deadline.saturating_duration_since(Instant::now());
    match started.wait_ticking(remaining, tick)? {
        Ok(value) => value,
        // The worker is abandoned: its thread ends once the stuck call returns.
        Err(RecvTimeoutError::Timeout) => {
            Err(unreachable(store.as_ref(), phase, what(), remaining))
        }
        Err(RecvTimeoutError::Disconnected) => Err(Error::new(
            phase,
            ErrorKind::Store(format!("{} panicked in the store", what())),
        )),
    }
}

/// A job running on a pooled worker thread (see [`start`]).
pub(crate) struct Started<T> {
    worker: Sender<Job>,
    result: mpsc::Receiver<T>,
}

impl<T> Started<T> {
    /// The job's result once it is done, the worker going back to the pool; an error
    /// when it does not finish within `limit` (the worker is then abandoned) or panicked.
    pub(crate) fn wait_ticking(
        self,
        limit: Duration,
        mut tick: impl FnMut() -> Result<()>,
    ) -> Result<std::result::Result<T, RecvTimeoutError>> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .result
                .recv_timeout(left.min(symmwin_device::waiting::LOOK_EVERY))
            {
                Ok(value) => {
                    self.back_to_pool();
                    return Ok(Ok(value));
                }
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => tick()?,
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    fn back_to_pool(self) {
        IDLE.lock().recover().push(self.worker);
    }

    /// [`Started::wait_for`] without a tick.
    pub(crate) fn wait_for(self, limit: Duration) -> std::result::Result<T, RecvTimeoutError> {
        let value = self.result.recv_timeout(limit)?;
        IDLE.lock().recover().push(self.worker);
        Ok(value)
    }
}

/// Start `job` on an idle worker (a new one if none is idle), for work that must not
/// block its caller: store calls with a deadline, and a rendezvous's imports, which
/// run side by side. Workers are kept for reuse, so their number stays the largest
/// number of jobs that ever ran at once.
pub(crate) fn start<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<Started<T>> {
    let (done, result) = mpsc::sync_channel(1);
    let mut job: Job = Box::new(move || {
        let _ = done.send(job());
    });
    let worker = loop {
        let worker = match idle_worker() {
            Some(w) => w,
            None => spawn_worker()?,
        };
        // A worker whose thread is gone hands the job back; try the next one.
        match worker.send(job) {
            Ok(()) => break worker,
            Err(mpsc::SendError(back)) => job = back,
        }
    };
    Ok(Started { worker, result })
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
