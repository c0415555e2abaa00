//! Device queries: which devices there are and what they can do. All are safe: they
//! take a device ordinal or id (a bad one is a status, not undefined behaviour) and
//! write only into locals.
//!
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html>,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html>

use std::ffi::{c_char, c_int, CStr};

use cudarc::driver::sys;

use super::init::require_loaded;
use super::{check, written, DriverResult};

/// `cuDeviceGetCount`.
pub fn device_count() -> DriverResult<i32> {
    require_loaded("cuDeviceGetCount")?;
    written("cuDeviceGetCount", 0, |count| {
        // SAFETY: the library is loaded (checked above); writes one int to a local.
        unsafe { sys::cuDeviceGetCount(count) }
    })
}

/// `cuDeviceGet`.
pub fn device_get(ordinal: i32) -> DriverResult<sys::CUdevice> {
    require_loaded("cuDeviceGet")?;
    written("cuDeviceGet", 0, |device| {
        // SAFETY: the library is loaded (checked above); writes one device id to a local;
        // a bad ordinal is reported as a status.
        unsafe { sys::cuDeviceGet(device, ordinal) }
    })
}

/// `cuDeviceGetName`.
pub fn device_name(device: sys::CUdevice) -> DriverResult<String> {
    require_loaded("cuDeviceGetName")?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the library is loaded (checked above); the driver writes at most `len`
    // bytes, NUL-terminated, into `buf`; a bad device is reported as a status.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device)
    })?;
    // The buffer is zero-initialised and the driver NUL-terminates within it.
    Ok(CStr::from_bytes_until_nul(&buf.map(|c| c as u8))
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// `cuDeviceGetAttribute`.
pub fn device_attribute(
    device: sys::CUdevice,
    attribute: sys::CUdevice_attribute,
) -> DriverResult<i32> {
    require_loaded("cuDeviceGetAttribute")?;
    written("cuDeviceGetAttribute", 0, |value| {
        // SAFETY: the library is loaded (checked above); writes one int to a local; a bad
        // device or attribute is reported as a status.
        unsafe { sys::cuDeviceGetAttribute(value, attribute, device) }
    })
}

/// `cuDeviceTotalMem`.
pub fn device_total_mem(device: sys::CUdevice) -> DriverResult<usize> {
    require_loaded("cuDeviceTotalMem")?;
    written("cuDeviceTotalMem", 0, |bytes| {
        // SAFETY: the library is loaded (checked above); writes one size to a local.
        unsafe { sys::cuDeviceTotalMem_v2(bytes, device) }
    })
}

/// `cuDeviceCanAccessPeer`.
pub fn device_can_access_peer(device: sys::CUdevice, peer: sys::CUdevice) -> DriverResult<bool> {
    require_loaded("cuDeviceCanAccessPeer")?;
    let mut can: c_int = 0;
    // SAFETY: the library is loaded (checked above); writes one int to a local.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, device, peer)
    })?;
    Ok(can != 0)
}
