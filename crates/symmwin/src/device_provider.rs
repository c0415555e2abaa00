//! Which provider serves a device: the one choice shared by the C ABI and the CLI.

use std::sync::Arc;

use symmwin_device::error::Result;
use symmwin_device::error::{Error, ErrorKind, Phase};
use symmwin_device::provider::{HandlePreference, Provider};
use symmwin_host::HostProvider;

/// The provider for `device`: host shared memory for a negative device (the C ABI's
/// `-1`), else CUDA device `device` exporting handles as `handle` asks.
pub fn provider_for_device(device: i32, handle: HandlePreference) -> Result<Arc<dyn Provider>> {
    if device < 0 {
        Ok(Arc::new(HostProvider::new()))
    } else {
        cuda_provider(device, handle)
    }
}

#[cfg(feature = "cuda")]
fn cuda_provider(device: i32, handle: HandlePreference) -> Result<Arc<dyn Provider>> {
    Ok(Arc::new(symmwin_cuda::CudaProvider::new(device, handle)?))
}

#[cfg(not(feature = "cuda"))]
fn cuda_provider(_device: i32, _handle: HandlePreference) -> Result<Arc<dyn Provider>> {
    Err(without_cuda())
}

/// What every CUDA entry point of a build without the `cuda` feature returns: the
/// error of a machine without a driver.
#[cfg_attr(feature = "cuda", allow(dead_code))]
pub(crate) fn without_cuda() -> Error {
    let why = "this symmwin was built without its `cuda` feature".to_owned();
    Error::new(Phase::Probe, ErrorKind::NoDriver(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_device_is_host_memory() {
        let provider = provider_for_device(-1, HandlePreference::Auto).unwrap();
        assert_eq!(provider.info().device, -1);
        assert_eq!(
            provider.info().kind,
            symmwin_device::provider::ProviderKind::Host
        );
    }
}
