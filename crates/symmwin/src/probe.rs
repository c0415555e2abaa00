//! What this machine offers: host memory always, CUDA devices when a driver exists.

use serde::Serialize;

#[cfg(feature = "cuda")]
pub use symmwin_cuda::DeviceReport;

/// A build without the `cuda` feature reports no CUDA device.
#[cfg(not(feature = "cuda"))]
#[derive(Debug, Clone, Serialize)]
pub enum DeviceReport {}

/// Everything `symmwin probe` reports.
#[derive(Debug, Serialize)]
pub struct MachineReport {
    /// Host provider granularity (the page size).
    pub host_granularity: usize,
    /// Why CUDA is unavailable, if it is.
    pub cuda_error: Option<String>,
    /// One entry per CUDA device.
    pub devices: Vec<DeviceReport>,
    /// `peer_access[a][b]`: device a can access device b's memory.
    pub peer_access: Vec<Vec<bool>>,
}

/// Probe the machine. Never fails: missing CUDA is reported in `cuda_error`.
pub fn machine() -> MachineReport {
    let host_granularity = symmwin_host::page_size();
    match cuda_devices() {
        Ok((devices, peer_access)) => MachineReport {
            host_granularity,
            cuda_error: None,
            devices,
            peer_access,
        },
        Err(e) => MachineReport {
            host_granularity,
            cuda_error: Some(e.to_string()),
            devices: Vec::new(),
            peer_access: Vec::new(),
        },
    }
}

/// Every CUDA device, and which can access which.
#[cfg(feature = "cuda")]
fn cuda_devices() -> symmwin_device::error::Result<(Vec<DeviceReport>, Vec<Vec<bool>>)> {
    use symmwin_cuda as cuda;
    let n = cuda::device_count()?;
    let devices = (0..n)
        .map(cuda::probe_device)
        .collect::<symmwin_device::error::Result<Vec<_>>>()?;
    let matrix = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| a == b || cuda::peer_access(a, b).unwrap_or(false))
                .collect()
        })
        .collect();
    Ok((devices, matrix))
}

#[cfg(not(feature = "cuda"))]
fn cuda_devices() -> symmwin_device::error::Result<(Vec<DeviceReport>, Vec<Vec<bool>>)> {
    Err(crate::device_provider::without_cuda())
}

/// [`machine`] as pretty JSON.
pub fn machine_json() -> String {
    serde_json::to_string_pretty(&machine()).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
