//! Which provider serves a device: the one choice shared by the C ABI and the CLI.

use std::sync::Arc;

use crate::provider::cuda::CudaProvider;
use crate::{HandlePreference, HostProvider, Provider, Result};

/// The provider for `device`: host shared memory for a negative device (the C ABI's
/// `-1`), else CUDA device `device` exporting handles as `handle` asks.
pub fn provider_for_device(device: i32, handle: HandlePreference) -> Result<Arc<dyn Provider>> {
    if device < 0 {
        Ok(Arc::new(HostProvider::new()))
    } else {
        Ok(Arc::new(CudaProvider::new(device, handle)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_device_is_host_memory() {
        let provider = provider_for_device(-1, HandlePreference::Auto).unwrap();
        assert_eq!(provider.info().device, -1);
        assert_eq!(provider.info().kind, crate::ProviderKind::Host);
    }
}
