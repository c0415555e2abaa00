//! `symmwin probe`: what this machine can do.

use std::process::ExitCode;

use symmwin::adapter::{DeviceReport, FabricDomainProbe, HandleSupport};

pub fn run(json: bool) -> Result<ExitCode, crate::failure::Failure> {
    if json {
        println!("{}", symmwin::adapter::probe_machine_json());
        return Ok(ExitCode::SUCCESS);
    }
    let report = symmwin::adapter::probe_machine();
    println!(
        "host memory: memfd, granularity {}",
        crate::human_size(report.host_granularity)
    );
    if let Some(e) = &report.cuda_error {
        println!("CUDA: {e}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", report_table(&report.devices));
    println!("peer access (row can access column):");
    let header: String = (0..report.peer_access.len())
        .map(|b| format!("{b:>5}"))
        .collect();
    println!("     {header}");
    for (a, row) in report.peer_access.iter().enumerate() {
        let cells: String = row
            .iter()
            .map(|&ok| format!("{:>5}", if ok { "yes" } else { "no" }))
            .collect();
        println!("{a:>4} {cells}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A human-readable table of `devices`, one row per device, for `symmwin probe`.
fn report_table(devices: &[DeviceReport]) -> String {
    use std::fmt::Write;
    let support = |h: &HandleSupport| match (&h.works, &h.error) {
        (true, _) => "yes".to_owned(),
        (false, Some(e)) => format!("no ({e})"),
        (false, None) => "no".to_owned(),
    };
    let mut out = String::new();
    if devices.is_empty() {
        out.push_str("no CUDA devices");
        return out;
    }
    for d in devices {
        let _ = writeln!(
            out,
            "cuda:{} {} (sm_{}{}, {}, driver {}.{})",
            d.ordinal,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            crate::human_size(d.total_memory),
            d.driver_version / 1000,
            d.driver_version % 1000 / 10,
        );
        if !d.vmm_supported {
            let _ = writeln!(out, "  VMM: not supported");
            continue;
        }
        let _ = writeln!(
            out,
            "  granularity: {} minimum, {} recommended",
            crate::human_size(d.granularity_min),
            crate::human_size(d.granularity_recommended)
        );
        let _ = writeln!(out, "  fabric handles: {}", support(&d.fabric));
        let _ = writeln!(out, "  POSIX fd handles: {}", support(&d.posix_fd));
        let _ = writeln!(out, "  fabric domain: {}", fabric_domain(&d.fabric_domain));
    }
    out.truncate(out.trim_end().len());
    out
}

/// The NVLink fabric domain as one phrase: the cluster and clique, or why there is none.
fn fabric_domain(probe: &FabricDomainProbe) -> String {
    match (&probe.domain, &probe.none_because) {
        (Some(d), _) => format!("cluster {} clique {}", d.cluster_uuid, d.clique_id),
        (None, Some(why)) => format!("none: {why}"),
        (None, None) => "none".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_failures_by_name() {
        let report = DeviceReport {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            total_memory: 150_754_820_096,
            vmm_supported: true,
            fabric: HandleSupport {
                works: false,
                error: Some("cuMemCreate: CUDA_ERROR_NOT_PERMITTED".into()),
            },
            posix_fd: HandleSupport {
                works: true,
                error: None,
            },
            granularity_min: 2 << 20,
            granularity_recommended: 2 << 20,
            driver_version: 13000,
            fabric_domain: FabricDomainProbe {
                domain: None,
                none_because: Some("fabric state is IN_PROGRESS".into()),
            },
        };
        let mut in_domain = report.clone();
        in_domain.fabric_domain = FabricDomainProbe {
            domain: Some(symmwin::adapter::FabricDomain {
                cluster_uuid: "0123456789abcdef0123456789abcdef".into(),
                clique_id: 3,
            }),
            none_because: None,
        };
        assert!(report_table(&[in_domain])
            .contains("fabric domain: cluster 0123456789abcdef0123456789abcdef clique 3"));
        let table = report_table(&[report]);
        assert!(
            table.contains("cuda:0 NVIDIA H200 (sm_90, 140.4 GiB, driver 13.0)"),
            "{table}"
        );
        assert!(
            table.contains("granularity: 2 MiB minimum, 2 MiB recommended"),
            "{table}"
        );
        assert!(table.contains("fabric handles: no (cuMemCreate: CUDA_ERROR_NOT_PERMITTED)"));
        assert!(table.contains("POSIX fd handles: yes"));
        assert!(table.contains("fabric domain: none: fabric state is IN_PROGRESS"));
        assert_eq!(report_table(&[]), "no CUDA devices");
    }
}
