//! The pipeline's activation hand-off: each rank receives from the rank before it and
//! sends to the rank after it, and the last rank sends back to rank 0 (ring neighbours).

use mlx_rs::{Array, Dtype};

use super::{Group, GroupError};

/// Receives this step's activations (`[rows, len, hidden]`) from the previous rank.
pub fn receive(group: &Group, shape: &[i32], dtype: Dtype) -> Result<Array, GroupError> {
    let prev = (group.rank() + group.size() - 1) % group.size();
    group.recv(shape, dtype, prev)
}

/// Sends activations on to the next rank (rank 0 after the last); evaluate it to send.
pub fn pass_on(group: &Group, h: &Array) -> Result<Array, GroupError> {
    group.send(h, (group.rank() + 1) % group.size())
}

/// Activations up to this size fit the sockets' buffers (Linux and macOS keep 128 KB a
/// socket), so their send completes before the next rank posts its receive.
const EAGER_BYTES: usize = 32 * 1024;

/// Sends `h` on to the next rank, and calls `announce` (the control message that lets that
/// rank post its receive; a posted ring receive busy-polls a core). Small activations go
/// first, so the receive finds them waiting; larger ones after, since their send waits for it.
pub fn hand_off<E: From<GroupError>>(
    group: &Group,
    h: &Array,
    announce: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let send = || -> Result<(), GroupError> {
        let sent = pass_on(group, h)?;
        sent.eval()
            .map_err(|source| GroupError::Mlx { op: "send", source })
    };
    match h.nbytes() <= EAGER_BYTES {
        true => {
            send()?;
            announce()
        }
        false => {
            announce()?;
            Ok(send()?)
        }
    }
}
