//! The CUDA provider's own tests; those that need a GPU are ignored without one.

use super::*;
use symmwin_device::lock::Recover;
use symmwin_device::provider::{PadLayout, PadSignal, SignalAt};

/// Device 0's provider, for the tests ignored without a GPU. The guard serialises
/// GPU tests: one of them plays two ranks in one process, and a synchronising
/// driver call from another test (cuMemFree waits for the whole device) between its
/// two halves of a barrier would stall the first half until it times out.
fn gpu() -> (std::sync::MutexGuard<'static, ()>, CudaProvider) {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = GPU.lock().recover();
    let provider = CudaProvider::new(0, HandlePreference::Auto).unwrap_or_else(|e| {
        panic!("this test needs a CUDA GPU (run it with --ignored on one): {e}")
    });
    (guard, provider)
}

/// Without a driver every entry point says so; with one, a device that does not
/// exist is an invalid argument. Neither panics.
#[test]
fn missing_driver_is_an_error_not_a_panic() {
    let count = match device_count() {
        Ok(count) => count,
        Err(err) => {
            for err in [
                err,
                CudaProvider::new(0, HandlePreference::Auto)
                    .map(drop)
                    .unwrap_err(),
                probe_device(0).map(drop).unwrap_err(),
                peer_access(0, 1).map(drop).unwrap_err(),
            ] {
                assert!(matches!(err.kind(), ErrorKind::NoDriver(_)), "{err}");
            }
            return;
        }
    };
    for err in [
        CudaProvider::new(count, HandlePreference::Auto)
            .map(drop)
            .unwrap_err(),
        probe_device(count).map(drop).unwrap_err(),
        probe_device(-1).map(drop).unwrap_err(),
        peer_access(0, count).map(drop).unwrap_err(),
    ] {
        assert!(matches!(err.kind(), ErrorKind::InvalidArgument(_)), "{err}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn span_coverage() {
    let (_gpu, provider) = gpu();
    let g = provider.granularity;
    let mut span = CudaSpan {
        stream: Arc::clone(&provider.stream),
        base: 0,
        len: 8 * g,
        granularity: g,
        mapped: [(0, 2 * g), (2 * g, g), (5 * g, g)].into_iter().fold(
            MappedRanges::default(),
            |mut m, (o, l)| {
                m.insert(o, l);
                m
            },
        ),
    };
    assert!(span.is_mapped(0, 3 * g));
    assert!(span.is_mapped(g, 2 * g));
    assert!(!span.is_mapped(0, 4 * g));
    assert!(span.is_mapped(5 * g, g));
    assert!(!span.is_mapped(4 * g, 2 * g));
    // Never handed to the driver: forget the fake mappings before drop.
    span.mapped.clear();
    span.len = 0;
    std::mem::forget(span);
}

fn read(span: &dyn Span, offset: usize, len: usize, provider: &CudaProvider) -> Vec<u8> {
    let mut out = vec![0xAB; len];
    // SAFETY: the range is mapped in a live span.
    unsafe { provider.read(span.base() + offset, &mut out) }.unwrap();
    out
}

fn sync(provider: &CudaProvider) {
    let _guard = provider.ctx.enter().unwrap();
    driver::ctx_synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn probe_reports_a_device() {
    let _gpu = gpu();
    let report = probe_device(0).unwrap();
    assert!(report.vmm_supported && report.posix_fd.works, "{report:?}");
    assert!(report.granularity_min > 0);
    assert!(report.granularity_recommended % report.granularity_min == 0);
    println!("{}", serde_json::to_string(&report).unwrap());
    assert!(peer_access(0, 0).unwrap());
    let bad = probe_device(device_count().unwrap()).unwrap_err();
    assert!(matches!(bad.kind(), ErrorKind::InvalidArgument(_)), "{bad}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn forced_handle_types() {
    let _gpu = gpu();
    let fd = CudaProvider::new(0, HandlePreference::Fd).unwrap();
    assert_eq!(fd.info().handle_type, HandleType::PosixFd);
    match CudaProvider::new(0, HandlePreference::Fabric) {
        Ok(p) => assert_eq!(p.info().handle_type, HandleType::Fabric),
        Err(e) => {
            println!("fabric: {e}");
            assert!(matches!(e.kind(), ErrorKind::Unsupported(_)), "{e}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn create_export_import_map_zero_upload() {
    let (_gpu, provider) = gpu();
    let info = provider.info();
    let g = info.granularity;
    println!("{info:?}");
    assert!(provider.create(g + 1).is_err());
    let mine = provider.create(2 * g).unwrap();
    let theirs = provider.import(mine.export().unwrap(), 2 * g).unwrap();
    let mut span = provider.reserve(4 * g).unwrap();
    span.map(0, mine.as_ref()).unwrap();
    span.map(2 * g, theirs.as_ref()).unwrap();
    assert!(span.map(g, theirs.as_ref()).is_err(), "overlapping map");
    drop((mine, theirs)); // mappings keep the memory alive
                          // Both mappings alias one allocation: write through one, read through the other.
    let base = span.base();
    // SAFETY: every range below lies in the span's two live mappings.
    unsafe {
        provider.write(base + 100, b"hello").unwrap();
        provider.copy(base + g, base + 100, 5).unwrap();
    }
    assert_eq!(read(span.as_ref(), 2 * g + g, 5, &provider), b"hello");
    span.zero(0, 2 * g).unwrap();
    assert!(read(span.as_ref(), 2 * g, 2 * g, &provider)
        .iter()
        .all(|&b| b == 0));
    assert!(span.zero(3 * g, 2 * g).is_err(), "zero past the span");

    let words = [1u64, u64::MAX, 0x1234_5678_9abc_def0];
    let table = provider.upload(&words).unwrap();
    let mut back = [0u8; 24];
    // SAFETY: the table holds 24 bytes.
    unsafe { provider.read(table.ptr(), &mut back) }.unwrap();
    let expect: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(&back[..], &expect[..]);
    assert_ne!(provider.upload(&[]).unwrap().ptr(), 0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn signals_on_device() {
    let (_gpu, provider) = gpu();
    let ranks = super::timeout_tests::TwoRanks::on(provider);
    let (provider, g) = (&ranks.provider, ranks.pad);
    let pads = |rank| ranks.pads(rank);
    let signals = provider.signals();
    let second = Duration::from_secs(1);
    if !kernels_built() {
        let err = signals
            .signal(&pads(0), PadSignal::Put(1), SignalAt::new(0, second, 0))
            .unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Unsupported(_)), "{err}");
        return;
    }
    // Put then wait, in order on the legacy stream.
    signals
        .signal(&pads(0), PadSignal::Put(1), SignalAt::new(3, second, 0))
        .unwrap();
    signals
        .signal(&pads(1), PadSignal::Wait(0), SignalAt::new(3, second, 0))
        .unwrap();
    sync(provider);
    provider.check_errors().unwrap();
    assert!(ranks.pads_are_zero());

    // Both halves of a barrier at once, on two streams.
    let a = PrivateStream::new(&provider.ctx).unwrap();
    let b = PrivateStream::new(&provider.ctx).unwrap();
    let rounds = 1000;
    let start = std::time::Instant::now();
    for channel in 0..rounds {
        for (rank, stream) in [(0, a.raw as usize), (1, b.raw as usize)] {
            let at = SignalAt::new(channel % 8, second, stream);
            signals.signal(&pads(rank), PadSignal::Barrier, at).unwrap();
        }
    }
    let per_launch = start.elapsed() / (2 * rounds as u32);
    sync(provider);
    println!("barrier launch: {per_launch:?} per call");
    provider.check_errors().unwrap();
    assert!(ranks.pads_are_zero());

    // A timeout traps and loses the context: timeout_tests.rs runs it in a
    // child process so the other tests keep theirs.

    // Bad arguments never reach the device.
    assert!(signals
        .signal(&pads(0), PadSignal::Put(2), SignalAt::new(0, second, 0))
        .is_err());
    assert!(signals
        .signal(&pads(0), PadSignal::Barrier, SignalAt::new(g, second, 0))
        .is_err());
    // World 1 needs no peers.
    let alone = PadLayout::from_parts(ranks.span.base(), g, g, 0, 1).unwrap();
    signals
        .signal(&alone, PadSignal::Barrier, SignalAt::new(0, second, 0))
        .unwrap();
}
