//! GPU tests of device-side timeouts: waits that finish in time never raise, and a wait
//! that times out traps, fails the next synchronization and makes every later call
//! report [`ErrorKind::ContextLost`] with the op, channel and peer.
//!
//! A trap loses the CUDA context of the whole process, so each timeout runs in a child
//! process (this test binary, re-run on one test) and the parent checks its output.

use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use symmwin_device::provider::{PadLayout, PadSignal, SignalAt};

/// Environment variable that turns `timeout_child` on and names its case.
const CHILD_CASE: &str = "SYMMWIN_TEST_TIMEOUT_CASE";

/// Both ranks of a world-2 group in this process: two zeroed pads of one granule each
/// in one span of one device.
pub(super) struct TwoRanks {
    pub(super) provider: CudaProvider,
    pub(super) span: Box<dyn Span>,
    pub(super) pad: usize,
}

impl TwoRanks {
    fn new() -> Self {
        Self::on(CudaProvider::new(0, HandlePreference::Auto).unwrap())
    }

    /// The two ranks' pads on `provider`'s device.
    pub(super) fn on(provider: CudaProvider) -> Self {
        let pad = provider.info().granularity;
        let mut span = provider.reserve(2 * pad).unwrap();
        for r in 0..2 {
            span.map(r * pad, provider.create(pad).unwrap().as_ref())
                .unwrap();
        }
        span.zero(0, 2 * pad).unwrap();
        TwoRanks {
            provider,
            span,
            pad,
        }
    }

    pub(super) fn pads(&self, rank: usize) -> PadLayout {
        PadLayout::from_parts(self.span.base(), self.pad, self.pad, rank, 2).unwrap()
    }

    pub(super) fn pads_are_zero(&self) -> bool {
        let mut bytes = vec![0xAB; 2 * self.pad];
        // SAFETY: both pads are mapped in the live span.
        unsafe { self.provider.read(self.span.base(), &mut bytes) }.unwrap();
        bytes.iter().all(|&b| b == 0)
    }
}

/// Fails the (ignored) test on a machine without a GPU instead of passing it silently.
fn require_gpu() {
    let count = device_count();
    assert!(
        matches!(count, Ok(n) if n > 0),
        "this test needs a CUDA GPU: {count:?}"
    );
    assert!(kernels_built(), "kernels/signal.ptx is a placeholder");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ten_thousand_barriers_and_signal_pairs_raise_nothing() {
    require_gpu();
    let ranks = TwoRanks::new();
    let signals = ranks.provider.signals();
    let (a, b) = (
        PrivateStream::new(&ranks.provider.ctx).unwrap(),
        PrivateStream::new(&ranks.provider.ctx).unwrap(),
    );
    let (sa, sb) = (a.raw as usize, b.raw as usize);
    // A limit no healthy round comes near, so only a broken wait can trip it.
    let limit = Duration::from_secs(10);
    let rounds = 10_000;
    let start = Instant::now();
    // Rank `rank` of the pair, on its own stream.
    let signal = |rank: usize, op, channel| {
        let stream = [sa, sb][rank];
        let at = SignalAt::new(channel, limit, stream);
        signals.signal(&ranks.pads(rank), op, at).unwrap()
    };
    for round in 0..rounds {
        let channel = round % 8;
        signal(0, PadSignal::Barrier, channel);
        signal(1, PadSignal::Barrier, channel);
        signal(0, PadSignal::Put(1), channel);
        signal(1, PadSignal::Wait(0), channel);
    }
    signals.synchronize(sa).unwrap();
    signals.synchronize(sb).unwrap();
    println!(
        "{rounds} barriers and {rounds} put/wait pairs per rank in {:?}",
        start.elapsed()
    );
    ranks.provider.check_errors().unwrap();
    assert!(ranks.pads_are_zero(), "every signal was consumed");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_timeout_traps_then_every_call_reports_it() {
    require_gpu();
    let exe = std::env::current_exe().unwrap();
    for (case, rank, peer) in [
        ("barrier", 0, 1),
        ("wait_signal", 1, 0),
        ("put_signal", 0, 1),
    ] {
        let out = Command::new(&exe)
            .args(["--exact", "timeout_tests::timeout_child"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_CASE, case)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("--- {case}: {}\n{text}", out.status);
        assert!(out.status.success(), "{case}: {text}");
        let device_line =
            format!("symmwin: device {case} timed out on rank {rank}, channel 3: waited");
        assert!(
            text.contains(&device_line),
            "{case}: no device line in\n{text}"
        );
        assert!(
            text.contains(&format!("for rank(s) {peer};")),
            "{case}: {text}"
        );
        assert!(text.contains("child ok"), "{case}: {text}");
    }
}

/// One timeout in a fresh process; run by the test above, a no-op on its own.
#[test]
#[ignore = "needs a CUDA GPU (run through device_timeout_traps_then_every_call_reports_it)"]
fn timeout_child() {
    let Ok(case) = std::env::var(CHILD_CASE) else {
        return;
    };
    let ranks = TwoRanks::new();
    let signals = ranks.provider.signals();
    let limit = Duration::from_millis(200);
    let channel = 3;
    // Only one side of each exchange runs, so the wait never completes.
    let signal = |rank: usize, op| {
        let at = SignalAt::new(channel, limit, 0);
        signals.signal(&ranks.pads(rank), op, at).unwrap()
    };
    let (rank, peer) = match case.as_str() {
        "barrier" => {
            signal(0, PadSignal::Barrier);
            (0, 1)
        }
        "wait_signal" => {
            signal(1, PadSignal::Wait(0));
            (1, 0)
        }
        "put_signal" => {
            // The first signal fills the slot; the second waits for it to clear.
            signal(0, PadSignal::Put(1));
            signal(0, PadSignal::Put(1));
            (0, 1)
        }
        other => panic!("unknown case {other}"),
    };
    let start = Instant::now();
    let err = signals.synchronize(0).unwrap_err();
    let elapsed = start.elapsed();
    println!("synchronize failed after {elapsed:?}: {err}");
    assert!(elapsed < limit + Duration::from_secs(1), "{elapsed:?}");
    let ErrorKind::ContextLost(timeout) = err.kind() else {
        panic!("not a lost context: {err}");
    };
    assert_eq!(
        (timeout.op, timeout.channel, timeout.rank),
        (case.as_str(), channel as u32, rank)
    );
    assert_eq!(timeout.missing, vec![peer]);
    assert!(
        timeout.waited >= limit && timeout.limit == limit,
        "{timeout:?}"
    );
    assert_eq!((err.rank(), err.peer()), (Some(rank), Some(peer)));
    // Every later call that reaches the device says the same, before touching the driver.
    for later in [
        ranks.provider.create(ranks.pad).map(drop).unwrap_err(),
        signals
            .signal(
                &ranks.pads(0),
                PadSignal::Barrier,
                SignalAt::new(0, limit, 0),
            )
            .unwrap_err(),
        CudaProvider::new(0, HandlePreference::Auto)
            .map(drop)
            .unwrap_err(),
    ] {
        assert!(later.is_context_lost(), "{later}");
        assert_eq!(later.to_string(), err.to_string());
    }
    println!("child ok: {err}");
    // The context is gone: skip destructors that would only log driver failures.
    std::process::exit(0);
}
