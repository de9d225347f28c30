//! The control channel's framing and peer authentication: length-prefixed JSON frames,
//! and an HMAC-SHA256 challenge-response over a token both sides know.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Frames above this are refused: the largest plan is one prefill chunk of token ids.
const MAX_FRAME: usize = 64 << 20;

pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a control frame of {len} bytes is over the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A socket whose reads all end by one instant: a handshake's whole deadline, so a peer that
/// sends a byte just before each read's timeout cannot stretch it.
pub struct Deadline<'a> {
    stream: &'a std::net::TcpStream,
    until: std::time::Instant,
}

impl<'a> Deadline<'a> {
    pub fn new(stream: &'a std::net::TcpStream, within: std::time::Duration) -> Deadline<'a> {
        Deadline {
            stream,
            until: std::time::Instant::now() + within,
        }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .until
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake's deadline passed",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

/// The shared secret that proves a peer belongs to this deployment.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// `MLX_DISTRIBUTED_TOKEN` when set; otherwise a digest of the hostfile, which keeps out
    /// strangers who do not have it, and is logged as the weaker choice it is.
    pub fn new(token: Option<&str>, hostfile_json: &str) -> Secret {
        match token.filter(|t| !t.is_empty()) {
            Some(t) => Secret(t.as_bytes().to_vec()),
            None => {
                tracing::warn!(
                    "MLX_DISTRIBUTED_TOKEN is not set: the control channel is authenticated \
                     with a digest of the hostfile only"
                );
                Secret(Sha256::digest(hostfile_json.as_bytes()).to_vec())
            }
        }
    }

    /// The proof that the holder of the secret, in `role`, answers the challenge `nonce`.
    pub fn proof(&self, role: &str, nonce: &str) -> String {
        hex(&self.mac(role, nonce).finalize().into_bytes())
    }

    /// Checks a proof in constant time.
    pub fn verify(&self, role: &str, nonce: &str, proof: &str) -> bool {
        match unhex(proof) {
            Some(bytes) => self.mac(role, nonce).verify_slice(&bytes).is_ok(),
            None => false,
        }
    }

    fn mac(&self, role: &str, nonce: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(role.as_bytes());
        mac.update(b"\0");
        mac.update(nonce.as_bytes());
        mac
    }
}

/// A fresh random challenge.
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // No /dev/urandom: fall back on time and address-space entropy, still unpredictable enough
        // for a challenge that only has to differ between connections.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seed = format!("{t:?}{:p}{}", &bytes, std::process::id());
        bytes.copy_from_slice(&Sha256::digest(seed.as_bytes())[..16]);
    }
    hex(&bytes)
}

/// A short digest of `bytes`, for fingerprints.
pub fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes)[..16])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_for_the_same_secret_role_and_nonce() {
        let (a, b) = (Secret::new(Some("t1"), ""), Secret::new(Some("t2"), ""));
        let n = nonce();
        let p = a.proof("leader", &n);
        assert!(a.verify("leader", &n, &p));
        assert!(!b.verify("leader", &n, &p));
        assert!(!a.verify("worker", &n, &p));
        assert!(!a.verify("leader", &nonce(), &p));
        assert!(!a.verify("leader", &n, "zz"));
    }

    #[test]
    fn frames_round_trip_and_refuse_oversize() -> Result<(), Box<dyn std::error::Error>> {
        let mut buf = Vec::new();
        write_frame(&mut buf, &serde_json::json!({"a": [1, 2]}))?;
        let back: serde_json::Value = read_frame(&mut buf.as_slice())?;
        assert_eq!(back["a"][1], 2);
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(read_frame::<serde_json::Value>(&mut huge.as_slice()).is_err());
        Ok(())
    }
}
