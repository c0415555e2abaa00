//! The runtime's one background worker: a pool of threads that runs what must not
//! block its caller.
//!
//! Three kinds of work use it: store calls with a deadline (a store outside our
//! control may block for minutes; [`crate::store::deadline`]), a rendezvous's imports,
//! which run side by side, and the jobs handed off a rendezvous's critical path
//! (exporting a handle ahead of the rendezvous that needs it, zeroing and unmapping
//! the windows the window cache lets go), which run one after another in the order
//! they were handed in. A job goes to an idle thread, or to a new
//! one when none is idle; the thread rejoins the pool before the job's result is
//! handed over, so the number of threads stays the largest number of jobs that ever
//! ran at once (a thread still on its way back from a job counts as running one: when
//! it rejoins is timing, so a caller that counts threads starts the pool at its
//! working size first, [`keep_idle`]). A caller that gives up on a job (its deadline
//! passed) abandons it: the thread stuck in it is not idle, so later jobs get another;
//! it rejoins if the job ever returns.

use std::collections::{BTreeSet, VecDeque};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use symmwin_device::lock::Recover;

use symmwin_device::error::{Error, Phase, Result};

/// What a job does once its thread is idle again: hand over its result.
type Finish = Box<dyn FnOnce() + Send>;
type Job = Box<dyn FnOnce() -> Finish + Send>;

const THREAD_NAME: &str = "symmwin-worker";

/// Idle threads, each waiting on its own queue.
static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

fn spawn_thread() -> Result<Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let own = tx.clone();
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                let finish = job();
                IDLE.lock().recover().push(own.clone());
                finish();
            }
        })
        .map_err(|e| Error::os(Phase::Publish, "spawn(worker thread)", e))?;
    Ok(tx)
}

/// Hand `job` to an idle thread (a new one when none is idle); the job back, with the
/// reason, when no thread can be spawned.
fn hand_off(mut job: Job) -> std::result::Result<(), (Job, Error)> {
    loop {
        let thread = match IDLE.lock().recover().pop() {
            Some(thread) => thread,
            None => match spawn_thread() {
                Ok(thread) => thread,
                Err(e) => return Err((job, e)),
            },
        };
        // A thread that has gone hands the job back; try the next one.
        match thread.send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => job = back,
        }
    }
}

/// Whether the caller is a pool thread (which must not wait for background jobs: it
/// may be the one that would run them).
pub(crate) fn on_worker() -> bool {
    std::thread::current().name() == Some(THREAD_NAME)
}

/// A job running on the pool, whose caller waits for its result (see [`start`]).
pub(crate) struct Started<T> {
    result: mpsc::Receiver<T>,
}

impl<T> Started<T> {
    /// The job's result once it is done; an error when it does not finish within
    /// `limit` (the job is then abandoned) or panicked. `tick` runs at least every
    /// [`symmwin_device::waiting::LOOK_EVERY`] while it waits: an error from it (an
    /// interrupt) ends the wait with it.
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
                Ok(value) => return Ok(Ok(value)),
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => tick()?,
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// [`Started::wait_ticking`] without a tick.
    pub(crate) fn wait_for(self, limit: Duration) -> std::result::Result<T, RecvTimeoutError> {
        self.result.recv_timeout(limit)
    }
}

/// Start `job` on the pool for a caller that waits for its result with a limit.
pub(crate) fn start<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<Started<T>> {
    let (done, result) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let value = job();
        Box::new(move || {
            let _ = done.send(value);
        })
    });
    hand_off(job).map_err(|(_, e)| e)?;
    Ok(Started { result })
}

/// Background jobs not yet finished, by the order they were handed in (for [`drain`]).
struct Pending {
    next: u64,
    running: BTreeSet<u64>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    next: 0,
    running: BTreeSet::new(),
});
static FINISHED: Condvar = Condvar::new();

/// A background job's place in [`PENDING`], given up when the job ends, panicked
/// or not.
struct Ticket(u64);

impl Ticket {
    fn take() -> Self {
        let mut pending = PENDING.lock().recover();
        pending.next += 1;
        let ticket = pending.next;
        pending.running.insert(ticket);
        Ticket(ticket)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        PENDING.lock().recover().running.remove(&self.0);
        FINISHED.notify_all();
    }
}

/// Background jobs waiting to run, in the order they were handed in. They run one
/// at a time, on one pool thread at a time, so that a burst of them (a loop freeing
/// windows) takes one thread, not one each.
struct Lane {
    queue: VecDeque<Box<dyn FnOnce() + Send>>,
    running: bool,
}

static LANE: Mutex<Lane> = Mutex::new(Lane {
    queue: VecDeque::new(),
    running: false,
});

/// Run `job` on the pool after every background job handed in before it, nobody
/// waiting for it ([`drain`] does); inline when no thread can be had.
pub(crate) fn in_background(job: impl FnOnce() + Send + 'static) {
    let ticket = Ticket::take();
    {
        let mut lane = LANE.lock().recover();
        lane.queue.push_back(Box::new(move || {
            job();
            drop(ticket);
        }));
        if std::mem::replace(&mut lane.running, true) {
            return;
        }
    }
    let runner: Job = Box::new(|| {
        run_lane();
        Box::new(|| {})
    });
    if let Err((runner, _)) = hand_off(runner) {
        runner()();
    }
}

/// Run the lane's jobs until it is empty. A job that panics is reported by the panic
/// hook and the lane goes on: a dead lane would leave [`drain`] waiting forever.
fn run_lane() {
    loop {
        let next = {
            let mut lane = LANE.lock().recover();
            match lane.queue.pop_front() {
                Some(job) => job,
                None => {
                    lane.running = false;
                    return;
                }
            }
        };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(next));
    }
}

/// Start pool threads until `count` are idle, for a caller that counts threads and
/// mappings and needs the pool at its working size first.
pub fn keep_idle(count: usize) -> Result<()> {
    while IDLE.lock().recover().len() < count {
        // A first job that does nothing: its result is handed over only after the new
        // thread runs and is back in the pool. A thread maps its signal stack as it
        // starts, so returning before that let a caller that counts mappings next see
        // one appear.
        let (started, running) = mpsc::sync_channel::<()>(1);
        let first: Job = Box::new(move || {
            Box::new(move || {
                let _ = started.send(());
            })
        });
        if spawn_thread()?.send(first).is_ok() {
            // An error here means the thread ended before its first job; the loop
            // starts another.
            let _ = running.recv();
        }
    }
    Ok(())
}

/// Wait until every background job handed in so far has finished (at once on a pool
/// thread, which may be the one that would run them).
pub(crate) fn drain() {
    if on_worker() {
        return;
    }
    let mut pending = PENDING.lock().recover();
    let handed_in = pending.next;
    while pending.running.first().is_some_and(|t| *t <= handed_in) {
        pending = FINISHED.wait(pending).recover();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn drain_waits_for_every_background_job_handed_in_before_it() {
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..8 {
            let done = Arc::clone(&done);
            in_background(move || {
                std::thread::sleep(Duration::from_millis(20));
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drain();
        assert_eq!(done.load(Ordering::SeqCst), 8);
    }

    /// Pool threads that have started: a thread names itself as it starts.
    fn started_pool_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == THREAD_NAME)
            .count()
    }

    #[test]
    fn keep_idle_returns_once_its_threads_run() {
        // (Not the idle count: this binary's other tests take idle threads meanwhile.)
        keep_idle(6).unwrap();
        assert!(started_pool_threads() >= 6);
    }

    #[test]
    fn an_abandoned_job_does_not_hold_up_the_next() {
        let stuck = start(|| std::thread::sleep(Duration::from_millis(500))).unwrap();
        assert!(stuck.wait_for(Duration::from_millis(10)).is_err());
        let quick = start(|| 7).unwrap();
        assert_eq!(quick.wait_for(Duration::from_millis(200)), Ok(7));
    }
}
