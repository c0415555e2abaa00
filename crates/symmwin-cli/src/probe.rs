//! `symmwin probe`: what this machine can do.

use std::process::ExitCode;

pub fn run(json: bool) -> Result<ExitCode, crate::failure::Failure> {
    if json {
        println!("{}", symmwin::probe::machine_json());
        return Ok(ExitCode::SUCCESS);
    }
    let report = symmwin::probe::machine();
    println!(
        "host memory: memfd, granularity {}",
        crate::human_size(report.host_granularity)
    );
    if let Some(e) = &report.cuda_error {
        println!("CUDA: {e}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", symmwin::provider::cuda::report_table(&report.devices));
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
