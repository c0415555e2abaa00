//! The arguments of a window's barrier, put_signal and wait_signal, named.
//!
//! ```
//! # use std::time::Duration;
//! use symmwin::{SignalOptions, Stream};
//! let defaults = SignalOptions::default(); // channel 0, the group's timeout, default stream
//! let tuned = SignalOptions::channel(3).timeout(Duration::from_millis(500));
//! assert_eq!((tuned.channel_index(), defaults.stream_handle()), (3, Stream::DEFAULT));
//! ```

use std::time::Duration;

use symmwin_device::provider::StreamHandle;

/// A CUDA stream to order a signal operation on. Host memory ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stream(StreamHandle);

impl Stream {
    /// The legacy default stream (and the only choice for host memory).
    pub const DEFAULT: Stream = Stream(0);

    /// A `CUstream` (e.g. torch's `torch.cuda.current_stream().cuda_stream`), as an
    /// address. It must stay alive until the operations ordered on it complete.
    pub fn from_raw(handle: usize) -> Stream {
        Stream(handle)
    }

    /// The raw `CUstream` address (0 for the default stream).
    pub fn raw(self) -> StreamHandle {
        self.0
    }
}

/// Which signal channel, how long to wait and on which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SignalOptions {
    channel: usize,
    timeout: Option<Duration>,
    stream: Stream,
}

impl SignalOptions {
    /// Use signal channel `channel` (a slot per peer in the pad; torch's kernels often
    /// use `blockIdx.x`). The default is channel 0.
    pub fn channel(channel: usize) -> Self {
        SignalOptions {
            channel,
            ..Self::default()
        }
    }

    /// Give up after `timeout` instead of the default: the group's timeout
    /// ([`crate::Config::group_timeout`]) for host memory, [`crate::Config::device_timeout`]
    /// for device memory.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Order the operation on `stream` instead of the default stream.
    pub fn stream(mut self, stream: Stream) -> Self {
        self.stream = stream;
        self
    }

    /// The channel.
    pub fn channel_index(&self) -> usize {
        self.channel
    }

    /// The timeout given, if any (`None`: the default of [`SignalOptions::timeout`]).
    pub fn timeout_given(&self) -> Option<Duration> {
        self.timeout
    }

    /// The stream.
    pub fn stream_handle(&self) -> Stream {
        self.stream
    }
}
