use super::*;
use symmwin_device::lock::Recover;

/// What a fake work does when waited for.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Done,
    /// Fails at once, the backend saying the connection is gone.
    Broken,
    /// Fails at once, the backend not saying why.
    Fails,
    /// Waits out its bound, then fails (as gloo's timeout does).
    Late,
}

#[derive(Default)]
struct Log {
    posts: Vec<(Vec<Message>, MessageMemory)>,
    waits: Vec<(usize, Option<Duration>)>,
    syncs: usize,
    copies: Vec<bool>,
}

/// A link whose works end as `outcome(peer)` says, logging every call.
struct FakeLink {
    nccl: bool,
    outcome: Box<dyn Fn(usize) -> Outcome + Send + Sync>,
    log: Arc<Mutex<Log>>,
}

impl ProcessGroupLink for FakeLink {
    type Work = usize;

    fn moves_device_memory(&self) -> bool {
        self.nccl
    }

    fn post(
        &self,
        batch: &[Message],
        memory: MessageMemory,
    ) -> Result<Vec<Option<usize>>, LinkFailure> {
        self.log
            .lock()
            .recover()
            .posts
            .push((batch.to_vec(), memory));
        Ok(match memory {
            MessageMemory::Host => batch.iter().map(|m| Some(m.peer)).collect(),
            MessageMemory::Device => {
                let mut works = vec![None; batch.len()];
                if let Some(last) = works.last_mut() {
                    *last = Some(usize::MAX);
                }
                works
            }
        })
    }

    fn wait(&self, peer: usize, bound: Option<Duration>) -> Result<(), LinkFailure> {
        self.log.lock().recover().waits.push((peer, bound));
        let fail = |broken| {
            Err(LinkFailure {
                peer: Some(peer),
                broken,
                message: format!("work of {peer} failed"),
            })
        };
        match (self.outcome)(peer) {
            Outcome::Done => Ok(()),
            Outcome::Broken => fail(true),
            Outcome::Fails => fail(false),
            Outcome::Late => {
                std::thread::sleep(bound.unwrap_or(Duration::ZERO));
                fail(false)
            }
        }
    }

    fn synchronize(&self, _stream: StreamHandle) -> Result<(), LinkFailure> {
        self.log.lock().recover().syncs += 1;
        Ok(())
    }

    fn copy(&self, dst: usize, src: usize, len: usize, to_device: bool) -> Result<(), LinkFailure> {
        self.log.lock().recover().copies.push(to_device);
        // SAFETY: the tests pass host buffers of `len` bytes for both sides.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }
}

fn peers(
    nccl: bool,
    device: bool,
    outcome: impl Fn(usize) -> Outcome + Send + Sync + 'static,
) -> (ProcessGroupPeers<FakeLink>, Arc<Mutex<Log>>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let link = FakeLink {
        nccl,
        outcome: Box::new(outcome),
        log: Arc::clone(&log),
    };
    (ProcessGroupPeers::new(link, device), log)
}

fn flag(peer: usize, direction: Direction) -> Flag {
    Flag {
        peer,
        direction,
        tag: 1,
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_host_flag_send_fails_at_the_next_call_naming_its_peer() {
    let (p, log) = peers(false, false, |peer| {
        if peer == 3 {
            Outcome::Broken
        } else {
            Outcome::Done
        }
    });
    // The send is handed to rank 3's completer: the call does not wait for it.
    p.flags(&[flag(3, Direction::Send)], SECOND, 0).unwrap();
    let deadline = Instant::now() + SECOND * 5;
    while p.deferred.lock().recover().is_none() {
        assert!(Instant::now() < deadline, "the completer never waited");
        std::thread::sleep(Duration::from_millis(1));
    }
    let f = p.flags(&[], Duration::ZERO, 0).unwrap_err();
    assert_eq!(f.peer, Some(3));
    assert!(!f.timed_out);
    assert!(
        f.message.contains("earlier signal to rank 3"),
        "{}",
        f.message
    );
    // Reported once.
    p.flags(&[], Duration::ZERO, 0).unwrap();
    assert_eq!(log.lock().recover().waits, vec![(3, None)]);
}

/// How a host wait for flags from ranks 1 and 2 fails when rank 1 is late and rank 2's
/// work ends as `rank_2` says.
fn receive_from_late_1_and_2(rank_2: Outcome, timeout: Duration) -> RemoteFailure {
    let (p, _) = peers(false, false, move |peer| match peer {
        1 => Outcome::Late,
        _ => rank_2,
    });
    let recv = [flag(1, Direction::Recv), flag(2, Direction::Recv)];
    p.flags(&recv, timeout, 0).unwrap_err()
}

#[test]
fn a_lost_peer_is_reported_before_a_late_one() {
    // Rank 2 failed before the deadline: it was not a timeout, whatever the type; a
    // peer that is gone fails early, and is the one named, whatever the order.
    for rank_2 in [Outcome::Fails, Outcome::Broken] {
        let f = receive_from_late_1_and_2(rank_2, Duration::from_millis(30));
        assert_eq!((f.peer, f.timed_out), (Some(2), false), "{rank_2:?}");
    }
}

#[test]
fn a_timeout_names_every_peer_it_waited_for_and_none_as_lost() {
    // Rank 1 times out; rank 2's wait then fails too (gloo closes every pair after a
    // timeout), which is no evidence that rank 2 is gone. Or rank 2 is stopped and
    // rank 1, alive, waits for it: both are late here, and the error must name both
    // (naming only the first would blame the live one).
    let f = receive_from_late_1_and_2(Outcome::Late, Duration::from_millis(30));
    assert_eq!((f.peer, f.timed_out), (Some(1), true));
    assert_eq!(f.also_waited_for, vec![2]);
    let error = crate::signal::remote::failure(f, Duration::from_millis(30));
    assert!(
        matches!(error.kind(), symmwin_device::error::ErrorKind::Timeout { missing, .. } if missing == &[1, 2]),
        "{error}"
    );
}

#[test]
fn a_failure_at_the_deadline_is_a_timeout() {
    let (p, _) = peers(false, false, |_| Outcome::Late);
    let f = p
        .flags(&[flag(1, Direction::Recv)], Duration::from_millis(10), 0)
        .unwrap_err();
    assert_eq!((f.peer, f.timed_out), (Some(1), true));
    // A broken connection is never a timeout.
    let (p, _) = peers(false, false, |_| Outcome::Broken);
    let f = p.flags(&[flag(1, Direction::Recv)], SECOND, 0).unwrap_err();
    assert!(!f.timed_out);
}

#[test]
fn host_data_sends_are_waited_for_in_the_call() {
    let (p, log) = peers(false, false, |_| Outcome::Done);
    let mut buf = [0u8; 4];
    let t = Transfer {
        peer: 1,
        direction: Direction::Send,
        ptr: buf.as_mut_ptr() as usize,
        len: 4,
        tag: 9,
    };
    p.transfer(&[t], SECOND, 0).unwrap();
    let log = log.lock().recover();
    assert_eq!(log.waits.len(), 1);
    assert!(log.waits[0].1.is_some(), "a bounded wait");
    assert_eq!(log.posts[0].0[0].bytes, Some((t.ptr, 4)));
}

#[test]
fn device_memory_through_nccl_is_one_group_the_stream_waits_for_when_it_receives() {
    let (p, log) = peers(true, true, |_| Outcome::Done);
    p.flags(
        &[flag(1, Direction::Send), flag(2, Direction::Send)],
        SECOND,
        7,
    )
    .unwrap();
    p.flags(
        &[flag(1, Direction::Send), flag(1, Direction::Recv)],
        SECOND,
        7,
    )
    .unwrap();
    let log = log.lock().recover();
    assert!(log
        .posts
        .iter()
        .all(|(_, memory)| *memory == MessageMemory::Device));
    // Only the batch that receives is waited for, once, on the stream (no bound).
    assert_eq!(log.waits, vec![(usize::MAX, None)]);
    assert_eq!(log.syncs, 0);
}

#[test]
fn device_memory_without_nccl_is_staged_through_the_host() {
    let (p, log) = peers(false, true, |_| Outcome::Done);
    let mut sent = [7u8; 8];
    let mut received = [0u8; 8];
    let transfers = [
        Transfer {
            peer: 1,
            direction: Direction::Send,
            ptr: sent.as_mut_ptr() as usize,
            len: 8,
            tag: 2,
        },
        Transfer {
            peer: 1,
            direction: Direction::Recv,
            ptr: received.as_mut_ptr() as usize,
            len: 8,
            tag: 3,
        },
    ];
    p.transfer(&transfers, SECOND, 7).unwrap();
    p.flags(&[flag(1, Direction::Recv)], SECOND, 7).unwrap();
    let log = log.lock().recover();
    assert_eq!(
        log.syncs, 2,
        "the stream drains before staged messages leave"
    );
    assert_eq!(
        log.copies,
        vec![false, true],
        "send staged out, receive copied back"
    );
    assert!(log
        .posts
        .iter()
        .all(|(_, memory)| *memory == MessageMemory::Host));
    let staged = &log.posts[0].0;
    assert!(staged.iter().all(|m| m
        .bytes
        .is_some_and(|(ptr, _)| ptr != sent.as_ptr() as usize)));
}
