//! The pipeline's activation hand-off: each rank receives from the rank before it and
//! sends to the rank after it, and the last rank sends back to rank 0 (ring neighbours),
//! over the MLX group; or, for decode-size steps, inside control messages (`Relay::Control`,
//! into each rank's `Inbox`).

use mlx_rs::{Array, Dtype};

use super::protocol::{ActivationDtype, Handoff, Relay};
use super::{Group, GroupError};

/// Activations up to this size travel inside control messages: a decode step's few rows of
/// hidden state (8 rows of 7,168 f32 values are 229 KB). Prefill chunks go over the group,
/// whose transports (JACCL above all) are made for bulk.
const CONTROL_BYTES: usize = 256 * 1024;

/// How step activations `h` travel, as rank 0 decides it for every rank.
pub fn handoff_for(h: &Array) -> Result<Handoff, String> {
    Ok(Handoff {
        dtype: ActivationDtype::of(h.dtype())?,
        relay: match h.nbytes() <= CONTROL_BYTES {
            true => Relay::Control,
            false => Relay::Group,
        },
    })
}

/// Receives this step's activations (`[rows, len, hidden]`) from the previous rank.
pub fn receive(group: &Group, shape: &[i32], dtype: Dtype) -> Result<Array, GroupError> {
    let prev = (group.rank() + group.size() - 1) % group.size();
    group.recv(shape, dtype, prev)
}

/// Sends activations on to the next rank (rank 0 after the last); evaluate it to send.
pub fn pass_on(group: &Group, h: &Array) -> Result<Array, GroupError> {
    group.send(h, (group.rank() + 1) % group.size())
}

/// Tells the next rank (`announce`: the control message on which it posts its receive; a
/// posted ring receive busy-polls a core, so it is posted only then), then sends `h` on.
/// Group-relayed activations are bigger than the sockets' buffers, so their send could not
/// complete before that receive anyway.
pub fn announce_and_send<E: From<GroupError>>(
    group: &Group,
    h: &Array,
    announce: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    announce()?;
    pass_on(group, h)?
        .eval()
        .map_err(|source| GroupError::Mlx { op: "send", source })?;
    Ok(())
}
