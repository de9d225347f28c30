#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// mlx-distributed patch: the half type as bindgen makes it on aarch64, for other targets.
#[cfg(any(not(target_arch = "aarch64"), mlx_sys_host_bindings))]
#[repr(transparent)]
#[derive(Debug, Default, Copy, Clone, Hash, PartialEq, Eq)]
pub struct float16_t(pub u16);
