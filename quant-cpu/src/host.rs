//! A graph node whose value comes from the host (`cpp/host_receive.cpp`): the CPU stream's
//! thread blocks in [`HostSource::fill`] until the value is there. A step's graph can then be
//! handed to MLX before its input has arrived, and nothing polls while it waits.

use std::ffi::c_void;
use std::sync::Arc;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, Stream};

/// Where a host receive's bytes come from.
pub trait HostSource: Send + Sync {
    /// Blocks until the value tagged `tag` is there and copies it into `dst` (exactly its
    /// size); false when it never will be (the node then reads zeros: the source must keep
    /// why, for its owner to report after the evaluation).
    fn fill(&self, tag: u64, dst: &mut [u8]) -> bool;
}

extern "C" {
    /// `cpp/host_receive.cpp`: builds the node; takes `source` over (releases it exactly once).
    fn mlxd_host_receive(
        res: *mut mlx_sys::mlx_array,
        shape: *const i32,
        ndim: usize,
        dtype: mlx_sys::mlx_dtype,
        source: *mut c_void,
        tag: u64,
        fill: Fill,
        release: Release,
        stream: mlx_sys::mlx_stream,
    ) -> i32;
}

type Fill = unsafe extern "C" fn(*mut c_void, u64, *mut u8, u64) -> i32;
type Release = unsafe extern "C" fn(*mut c_void);

/// A lazy array of `shape` and `dtype` whose bytes `source` supplies (value `tag`) when the
/// node runs, on the CPU stream.
pub fn host_receive(
    shape: &[i32],
    dtype: Dtype,
    source: Arc<dyn HostSource>,
    tag: u64,
) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    let boxed: *mut Arc<dyn HostSource> = Box::into_raw(Box::new(source));
    // SAFETY: the shim owns `boxed` from here on and hands it back to `release` once;
    // `shape` outlives the call, and mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_host_receive(
            res,
            shape.as_ptr(),
            shape.len(),
            dtype as mlx_sys::mlx_dtype,
            boxed.cast(),
            tag,
            fill,
            release,
            stream.as_ptr(),
        )
    })
}

/// Called by the shim on the stream thread. A panic must not unwind into C++, so it aborts
/// (`extern "C"`).
///
/// # Safety
/// `source` came from [`host_receive`] and is not yet released; `dst` holds `nbytes` bytes.
unsafe extern "C" fn fill(source: *mut c_void, tag: u64, dst: *mut u8, nbytes: u64) -> i32 {
    let source = &*(source as *const Arc<dyn HostSource>);
    let dst = std::slice::from_raw_parts_mut(dst, nbytes as usize);
    match source.fill(tag, dst) {
        true => 0,
        false => 1,
    }
}

/// # Safety
/// `source` came from [`host_receive`]; the shim calls this once.
unsafe extern "C" fn release(source: *mut c_void) {
    drop(Box::from_raw(source as *mut Arc<dyn HostSource>));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    #[derive(Default)]
    struct Slot {
        value: Mutex<Option<(u64, Vec<u8>)>>,
        arrived: Condvar,
    }

    impl HostSource for Slot {
        fn fill(&self, tag: u64, dst: &mut [u8]) -> bool {
            let mut v = self.value.lock().unwrap();
            loop {
                match v.take() {
                    Some((t, bytes)) if t == tag && bytes.len() == dst.len() => {
                        dst.copy_from_slice(&bytes);
                        return true;
                    }
                    Some(_) => return false,
                    None => v = self.arrived.wait(v).unwrap(),
                }
            }
        }
    }

    #[test]
    fn the_node_waits_for_its_value_and_feeds_the_graph() {
        let slot = Arc::new(Slot::default());
        let x = host_receive(&[2, 3], Dtype::Float32, slot.clone(), 7).unwrap();
        let y = x.multiply(Array::from_f32(2.0)).unwrap();
        let feeder = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let bytes: Vec<u8> = [1f32, 2., 3., 4., 5., 6.]
                    .iter()
                    .flat_map(|v| v.to_ne_bytes())
                    .collect();
                *slot.value.lock().unwrap() = Some((7, bytes));
                slot.arrived.notify_all();
            })
        };
        y.eval().unwrap();
        feeder.join().unwrap();
        assert_eq!(y.as_slice::<f32>(), &[2., 4., 6., 8., 10., 12.]);
        assert_eq!(y.shape(), &[2, 3]);
    }

    #[test]
    fn a_value_that_never_comes_reads_zeros_and_the_source_is_released() {
        let slot = Arc::new(Slot::default());
        *slot.value.lock().unwrap() = Some((1, vec![0xff; 8]));
        let x = host_receive(&[2], Dtype::Float32, slot.clone(), 2).unwrap();
        x.eval().unwrap();
        assert_eq!(x.as_slice::<f32>(), &[0., 0.]);
        drop(x);
        assert_eq!(Arc::strong_count(&slot), 1);
    }
}
