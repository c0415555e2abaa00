//! The process-wide state behind the handles: the registry of allocations and
//! groups, and one provider per device.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use symmwin::adapter::Recover;

use symmwin::{adapter::Registry, Provider};

use crate::setup::config;

pub(crate) static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

pub(crate) static PROVIDERS: LazyLock<Mutex<HashMap<i32, Arc<dyn Provider>>>> =
    LazyLock::new(Default::default);

/// The device code of host memory.
pub(crate) const HOST_DEVICE: i32 = -1;

pub(crate) fn provider(device: i32) -> symmwin::Result<Arc<dyn Provider>> {
    if device < HOST_DEVICE {
        return Err(symmwin::Error::invalid(format!(
            "device {device} is neither a CUDA device (0 or more) nor host memory (-1)"
        )));
    }
    if device >= 0 {
        // After a device wait trapped, say so before anything touches the lost context.
        symmwin::adapter::check_cuda_context()?;
    }
    let mut providers = PROVIDERS.lock().recover();
    if let Some(p) = providers.get(&device) {
        return Ok(p.clone());
    }
    let p = symmwin::adapter::provider_for_device(device, config()?.handle)?;
    providers.insert(device, p.clone());
    Ok(p)
}
