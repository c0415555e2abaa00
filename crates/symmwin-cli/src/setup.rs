//! What `demo` and `bench` check once, before starting any rank: the configuration
//! and the memory provider. A rank never has to discover either on its own.

use std::time::Duration;
use symmwin::CudaProvider;

use symmwin::Config;

use crate::failure::Failure;
use crate::ProviderChoice;

/// The provider the ranks will use, as chosen and as resolved.
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    pub requested: ProviderChoice,
    pub used: ProviderChoice,
    /// How long a rank waits for its peers.
    pub timeout: Duration,
}

impl Resolved {
    /// How long the other ranks may run once one has exited: a failure reaches
    /// every peer within its timeout, so longer means a rank is stuck.
    pub fn grace(&self) -> Duration {
        self.timeout + Duration::from_secs(5)
    }

    /// "host", or "auto → host" when auto chose it.
    pub fn describe(&self) -> String {
        if self.requested == self.used {
            self.used.name().to_owned()
        } else {
            format!("{} → {}", self.requested.name(), self.used.name())
        }
    }
}

/// Read the configuration and make sure the provider works here (for CUDA: a
/// device exists and its handle type can be probed).
pub fn check(requested: ProviderChoice) -> Result<Resolved, Failure> {
    let config = Config::from_env().map_err(Failure::setup)?;
    let used = match requested {
        ProviderChoice::Host => ProviderChoice::Host,
        ProviderChoice::Auto if cuda_devices() == 0 => ProviderChoice::Host,
        ProviderChoice::Auto | ProviderChoice::Cuda => {
            probe_cuda(&config).map_err(|e| {
                Failure::setup(format!("{e} (use --provider host to run on host memory)"))
            })?;
            ProviderChoice::Cuda
        }
    };
    Ok(Resolved {
        requested,
        used,
        timeout: config.timeout,
    })
}

fn cuda_devices() -> i32 {
    symmwin::adapter::cuda_device_count().unwrap_or(0)
}

fn probe_cuda(config: &Config) -> symmwin::Result<()> {
    let devices = symmwin::adapter::cuda_device_count()?;
    if devices == 0 {
        return Err(symmwin::Error::new(
            symmwin::Phase::Probe,
            symmwin::ErrorKind::NoDriver("no CUDA device".into()),
        ));
    }
    CudaProvider::new(0, config.handle).map(drop)
}
