//! The NVML calls of `fabric_domain` against a stand-in NVML (`fake_nvml.c`, built
//! with the system C compiler), so the struct versions, the fallbacks and the balance
//! of init and shutdown are exercised on machines without a GPU.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use libloading::{Library, Symbol};

use super::*;
use crate::nvml::symbol;

const PCI: &str = "00000000:18:00.0";

/// The stand-in built as `variant` (a `FAKE_*` define, or none) in a directory of its own.
struct FakeNvml {
    dir: PathBuf,
    path: String,
}

impl FakeNvml {
    fn build(variant: Option<&str>) -> Self {
        // One directory per build: tests run in parallel, and two loads of one path
        // would share the stand-in's counters.
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        let build = BUILDS.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("symmwin-fake-nvml-{}-{build}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("fake_nvml.c");
        std::fs::write(&source, include_str!("fake_nvml.c")).unwrap();
        let library = dir.join("libnvidia-ml.so.1");
        let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        cc.args(["-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(format!("-DFAKE_PCI=\"{PCI}\""))
            .arg(&source);
        if let Some(define) = variant {
            cc.arg(format!("-D{define}"));
        }
        let out = cc.output().expect("a C compiler (cc, or $CC)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        FakeNvml {
            path: path_str(&library),
            dir,
        }
    }

    /// Reads through the stand-in, then says how many inits and shutdowns it saw
    /// (holding the library loaded, so its counters outlive the read's own handle).
    fn read(&self, pci_address: &str) -> (Result<FabricDomain, NoFabricDomain>, i32, i32) {
        // SAFETY: the stand-in has no initialisers.
        let lib = unsafe { Library::new(&self.path) }.unwrap();
        let read = read_through(&self.path, pci_address);
        let counter = |name| {
            // SAFETY: the stand-in's counters are `int (void)`.
            let count: Symbol<unsafe extern "C" fn() -> i32> =
                unsafe { symbol(&lib, name) }.unwrap();
            // SAFETY: the stand-in's counters take nothing and return an int.
            unsafe { count() }
        };
        (read, counter("fake_inits"), counter("fake_shutdowns"))
    }
}

impl Drop for FakeNvml {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path_str(path: &Path) -> String {
    path.to_str().unwrap().to_owned()
}

const UUID_HEX: &str = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf";

/// Reads through the stand-in built as `variant`, asserting that NVML was shut down
/// once, whatever the read's outcome.
fn read_shut_down_once(
    variant: Option<&str>,
    pci_address: &str,
) -> Result<FabricDomain, NoFabricDomain> {
    let (read, _, shutdowns) = FakeNvml::build(variant).read(pci_address);
    assert_eq!(shutdowns, 1, "NVML shut down once");
    read
}

#[test]
fn the_versioned_query_answers_with_v3() {
    let (read, inits, shutdowns) = FakeNvml::build(None).read(PCI);
    let domain = read.unwrap();
    assert_eq!(domain.cluster_uuid, UUID_HEX);
    assert_eq!(domain.clique_id, 3, "answered by v3");
    assert_eq!((inits, shutdowns), (1, 1));
}

#[test]
fn a_driver_that_knows_only_v2_is_asked_again_with_v2() {
    let read = read_shut_down_once(Some("FAKE_V2"), PCI);
    assert_eq!(read.unwrap().clique_id, 2, "answered by v2");
}

#[test]
fn a_driver_without_the_versioned_query_is_asked_unversioned() {
    let domain = read_shut_down_once(Some("FAKE_V1"), PCI).unwrap();
    assert_eq!(
        (domain.cluster_uuid.as_str(), domain.clique_id),
        (UUID_HEX, 1)
    );
}

#[test]
fn a_driver_without_any_fabric_query_has_no_domain() {
    let read = read_shut_down_once(Some("FAKE_NO_QUERY"), PCI);
    assert_eq!(
        read.unwrap_err(),
        NoFabricDomain::SymbolMissing("nvmlDeviceGetGpuFabricInfo")
    );
}

#[test]
fn an_unknown_device_names_the_lookup_and_still_shuts_down() {
    let err = read_shut_down_once(None, "00000000:19:00.0").unwrap_err();
    assert_eq!(
        err.to_string(),
        "nvmlDeviceGetHandleByPciBusId_v2 failed: Not Found (NVML status 6)"
    );
}

#[test]
fn a_failed_init_is_never_shut_down() {
    let (read, inits, shutdowns) = FakeNvml::build(Some("FAKE_INIT_FAILS")).read(PCI);
    let err = read.unwrap_err();
    assert!(
        matches!(&err, NoFabricDomain::Nvml { call: "nvmlInit_v2", status } if status.code == 9),
        "{err}"
    );
    assert_eq!((inits, shutdowns), (0, 0));
}

#[test]
fn a_missing_library_is_no_domain() {
    let err = read_through("/nonexistent/libnvidia-ml.so.1", PCI).unwrap_err();
    assert!(matches!(err, NoFabricDomain::NvmlMissing(_)), "{err}");
}
