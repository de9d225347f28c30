//! A safe wrapper over mlx-c's distributed API: the only place that calls it.

use std::ffi::CString;

use mlx_rs::{raw, Array, Dtype, Stream};
use mlx_sys::mlx_distributed_group;

use super::Hostfile;

/// Which MLX transport carries the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP sockets, listed in `MLX_HOSTFILE`; runs everywhere.
    Ring,
    /// RDMA over Thunderbolt 5; macOS only.
    Jaccl,
    /// Whatever MLX picks first that is available.
    Any,
}

impl Transport {
    fn mlx_name(self) -> &'static str {
        match self {
            Transport::Ring => "ring",
            Transport::Jaccl => "jaccl",
            Transport::Any => "any",
        }
    }
}

/// An MLX error raised by a distributed call.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("MLX distributed backend `{0}` is not available in this build of MLX")]
    Unavailable(&'static str),
    #[error("cannot set up the MLX group: {0}")]
    Setup(String),
    #[error("MLX distributed {op} failed: {}", crate::error::mlx_text(source))]
    Mlx {
        op: &'static str,
        #[source]
        source: mlx_rs::error::Exception,
    },
}

fn mlx(op: &'static str) -> impl FnOnce(mlx_rs::error::Exception) -> GroupError {
    move |source| GroupError::Mlx { op, source }
}

/// A group of ranks; every collective is a lazy array op until evaluated.
pub struct Group {
    raw: mlx_distributed_group,
}

// SAFETY: the group is an immutable handle to MLX's communicator; MLX guards its use.
unsafe impl Send for Group {}

impl From<GroupError> for crate::error::Error {
    fn from(e: GroupError) -> Self {
        crate::error::Error::Group(e.to_string())
    }
}

impl Group {
    /// True when this build of MLX has the given transport compiled in.
    pub fn is_available(transport: Transport) -> bool {
        let name = CString::new(transport.mlx_name()).expect("static name");
        unsafe { mlx_sys::mlx_distributed_is_available(name.as_ptr()) }
    }

    /// Joins the group that the environment (MLX_HOSTFILE, MLX_RANK, ...) describes.
    /// With `strict`, a missing or broken configuration is an error instead of a group of one.
    pub fn init(transport: Transport, strict: bool) -> Result<Group, GroupError> {
        if transport != Transport::Any && !Self::is_available(transport) {
            return Err(GroupError::Unavailable(transport.mlx_name()));
        }
        let name = CString::new(transport.mlx_name()).expect("static name");
        let mut raw = unsafe { mlx_sys::mlx_distributed_group_new() };
        raw::try_status_op("init", || unsafe {
            mlx_sys::mlx_distributed_init(&mut raw, strict, name.as_ptr())
        })
        .map_err(mlx("init"))?;
        Ok(Group { raw })
    }

    pub fn rank(&self) -> usize {
        unsafe { mlx_sys::mlx_distributed_group_rank(self.raw) as usize }
    }

    pub fn size(&self) -> usize {
        unsafe { mlx_sys::mlx_distributed_group_size(self.raw) as usize }
    }

    /// Sum of `x` over all ranks.
    pub fn all_sum(&self, x: &Array) -> Result<Array, GroupError> {
        let s = Stream::cpu();
        raw::try_array_op(|res| unsafe {
            mlx_sys::mlx_distributed_all_sum(res, x.as_ptr(), self.raw, s.as_ptr())
        })
        .map_err(mlx("all_sum"))
    }

    /// Every rank's `x`, concatenated along the first axis in rank order.
    pub fn all_gather(&self, x: &Array) -> Result<Array, GroupError> {
        let s = Stream::cpu();
        raw::try_array_op(|res| unsafe {
            mlx_sys::mlx_distributed_all_gather(res, x.as_ptr(), self.raw, s.as_ptr())
        })
        .map_err(mlx("all_gather"))
    }

    /// Sends `x` to rank `dst`; evaluate the result to make the send happen.
    pub fn send(&self, x: &Array, dst: usize) -> Result<Array, GroupError> {
        let s = Stream::cpu();
        raw::try_array_op(|res| unsafe {
            mlx_sys::mlx_distributed_send(res, x.as_ptr(), dst as i32, self.raw, s.as_ptr())
        })
        .map_err(mlx("send"))
    }

    /// Receives an array of the given shape and dtype from rank `src`.
    pub fn recv(&self, shape: &[i32], dtype: Dtype, src: usize) -> Result<Array, GroupError> {
        let s = Stream::cpu();
        raw::try_array_op(|res| unsafe {
            mlx_sys::mlx_distributed_recv(
                res,
                shape.as_ptr(),
                shape.len(),
                dtype.into(),
                src as i32,
                self.raw,
                s.as_ptr(),
            )
        })
        .map_err(mlx("recv"))
    }
}

/// Forgets MLX's cached groups, so the next `init` forms a new one (after a peer was lost).
pub fn clear_groups() {
    let _ = raw::try_status_op("clear_backends", || unsafe {
        mlx_sys::mlx_distributed_clear_backends()
    });
}

impl Group {
    /// Joins the group `hostfile` describes as `rank`: writes the file MLX reads, sets the
    /// environment MLX 0.32 expects, and initializes strictly. MLX reads a group's settings
    /// from the environment only (mlx-c's init takes none), so this is the one place the
    /// library sets variables; the engine thread and the follower call it, one at a time.
    pub fn join(
        hostfile: &Hostfile,
        rank: usize,
        coordinator: Option<&str>,
    ) -> Result<Group, GroupError> {
        let file = GroupFile::write(hostfile, rank)?;
        let path = &file.0;
        std::env::set_var("MLX_RANK", rank.to_string());
        let transport = match hostfile {
            Hostfile::Ring { .. } => {
                std::env::set_var("MLX_HOSTFILE", path);
                Transport::Ring
            }
            Hostfile::Jaccl {
                coordinator: own, ..
            } => {
                std::env::set_var("MLX_IBV_DEVICES", path);
                let coordinator = coordinator.map(str::to_string).or_else(|| own.clone());
                if let Some(c) = coordinator {
                    std::env::set_var("MLX_JACCL_COORDINATOR", c);
                }
                Transport::Jaccl
            }
        };
        let group = Group::init(transport, true)?;
        if group.size() != hostfile.size() || group.rank() != rank {
            return Err(GroupError::Setup(format!(
                "MLX formed a group of {} as rank {}, expected {} as rank {rank}",
                group.size(),
                group.rank(),
                hostfile.size()
            )));
        }
        Ok(group)
    }
}

/// The file MLX reads a group's addresses from while it forms the group; removed when the
/// join ends, formed or not (one was left in the temp folder per process and join).
struct GroupFile(std::path::PathBuf);

impl GroupFile {
    fn write(hostfile: &Hostfile, rank: usize) -> Result<GroupFile, GroupError> {
        let path = std::env::temp_dir().join(format!(
            "mlx-distributed-{}-rank{rank}.json",
            std::process::id()
        ));
        std::fs::write(&path, hostfile.mlx_json()).map_err(|e| GroupError::Setup(e.to_string()))?;
        Ok(GroupFile(path))
    }
}

impl Drop for GroupFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        unsafe {
            mlx_sys::mlx_distributed_group_free(self.raw);
        }
    }
}
