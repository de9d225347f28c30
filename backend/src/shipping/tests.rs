//! Shipping's protocol on loopback with a small hand-made model folder (no MLX): the share
//! (layers, or tensor parts as runs), the sparse copy, reuse, resume, a corrupted item and a
//! wrong secret.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::distributed::protocol::Shipment;
use crate::distributed::wire::Secret;
use crate::models::Layout;

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// A scratch folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> std::io::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("ship-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TENSORS: [(&str, u8); 4] = [
    ("model.embed_tokens.weight", 1),
    ("model.layers.0.a.weight", 2),
    ("model.layers.1.a.weight", 3),
    ("model.layers.1.b.weight", 4),
];

/// config.json, tokenizer.json, a hidden file and a safetensors file of four 64-byte tensors
/// of 4 x 4 f32 (each byte its tensor's number).
fn model(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("config.json"), br#"{"num_hidden_layers": 2}"#)?;
    std::fs::write(dir.join("tokenizer.json"), b"{}")?;
    std::fs::write(dir.join(".stamp"), b"not shipped")?;
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, byte) in TENSORS {
        let start = data.len();
        data.extend([byte; 64]);
        header.insert(
            name.into(),
            serde_json::json!({"dtype": "F32", "shape": [4, 4], "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&header)?;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header);
    file.extend(data);
    std::fs::write(dir.join("model.safetensors"), file)
}

/// Serves rank 1's share of layers 1..2 of the model in `dir`.
fn serve(dir: &Path, corrupt: Option<&str>) -> Result<(Shipper, Shipment)> {
    serve_portion(
        dir,
        &Portion::Layers {
            layers: 1..2,
            layout: Layout::Model,
        },
        corrupt,
    )
}

/// Serves rank 1's share as `portion` says.
fn serve_portion(
    dir: &Path,
    portion: &Portion,
    corrupt: Option<&str>,
) -> Result<(Shipper, Shipment)> {
    let (listener, address) = listen("127.0.0.1:1")?;
    let fingerprint = crate::loader::fingerprint(dir)?;
    let share = share(dir, portion, fingerprint, address)?;
    let shares = Shares {
        dir: dir.to_owned(),
        by_rank: HashMap::from([(1, share.clone())]),
        secret: Secret::new(Some("t"), ""),
        corrupt: corrupt.map(str::to_owned),
    };
    Ok((Shipper::start(listener, shares)?, share))
}

fn receive_into(ship: &Shipment, cache: &Path, token: &str) -> Result<PathBuf> {
    let secret = Secret::new(Some(token), "");
    let opts = ReceiveOptions {
        rank: 1,
        secret: &secret,
        cache: cache.to_owned(),
    };
    receive(ship, &opts)
}

fn transfer(dir: &Path) -> std::result::Result<serde_json::Value, Box<dyn std::error::Error>> {
    let record = std::fs::read(dir.join(".shipping/last-transfer.json"))?;
    Ok(serde_json::from_slice(&record)?)
}

#[test]
fn a_share_arrives_sparse_once_and_resumes() -> TestResult {
    let (src, cache) = (Scratch::new("src")?, Scratch::new("cache")?);
    model(&src.0)?;
    let (_shipper, ship) = serve(&src.0, None)?;
    let names: Vec<&str> = ship.items.iter().map(|i| i.name.as_str()).collect();
    let want = [
        "config.json",
        "tokenizer.json",
        "model.safetensors header",
        "model.layers.1.a.weight",
        "model.layers.1.b.weight",
    ];
    assert_eq!(names, want);

    let dir = receive_into(&ship, &cache.0, "t")?;
    let (ours, theirs) = (
        std::fs::read(dir.join("model.safetensors"))?,
        std::fs::read(src.0.join("model.safetensors"))?,
    );
    assert_eq!(ours.len(), theirs.len());
    let data = theirs.len() - 4 * 64;
    for (i, (_, byte)) in TENSORS.iter().enumerate() {
        let range = data + i * 64..data + (i + 1) * 64;
        let held = if i >= 2 { *byte } else { 0 };
        assert!(ours[range].iter().all(|b| *b == held), "tensor {i}");
    }
    assert_eq!(ours[..data], theirs[..data]);
    assert!(!dir.join(".stamp").exists());
    let first = transfer(&dir)?;
    let share: u64 = ship.items.iter().map(|i| i.len).sum();
    assert_eq!(first["share_bytes"].as_u64(), Some(share));
    assert!(first["received_bytes"].as_u64() > Some(share));

    receive_into(&ship, &cache.0, "t")?;
    assert_eq!(transfer(&dir)?["received_bytes"].as_u64(), Some(0));

    // A record that lost its last item: only that one is asked for again.
    let record = dir.join(".shipping/received");
    let text = std::fs::read_to_string(&record)?;
    let kept: Vec<&str> = text.lines().take(want.len() - 1).collect();
    std::fs::write(&record, kept.join("\n") + "\n")?;
    receive_into(&ship, &cache.0, "t")?;
    assert_eq!(transfer(&dir)?["items_received"].as_u64(), Some(1));

    // A file removed from the cache is shipped again, whatever the record says.
    std::fs::remove_file(dir.join("model.safetensors"))?;
    receive_into(&ship, &cache.0, "t")?;
    assert_eq!(transfer(&dir)?["items_received"].as_u64(), Some(3));
    assert_eq!(std::fs::read(dir.join("model.safetensors"))?, ours);
    Ok(())
}

#[test]
fn a_corrupted_item_is_asked_again_then_named() -> TestResult {
    let (src, cache) = (Scratch::new("src-bad")?, Scratch::new("cache-bad")?);
    model(&src.0)?;
    let (_shipper, ship) = serve(&src.0, Some("model.layers.1.b.weight"))?;
    let err = receive_into(&ship, &cache.0, "t")
        .err()
        .ok_or("a corrupted item was taken")?
        .to_string();
    assert!(err.contains("`model.layers.1.b.weight`"), "{err}");
    assert!(err.contains("3 times"), "{err}");
    // Everything else arrived and is kept.
    let record =
        std::fs::read_to_string(cache.0.join(&ship.fingerprint).join(".shipping/received"))?;
    assert_eq!(record.lines().count(), ship.items.len() - 1);
    Ok(())
}

#[test]
fn a_worker_without_the_secret_gets_nothing() -> TestResult {
    let (src, cache) = (Scratch::new("src-auth")?, Scratch::new("cache-auth")?);
    model(&src.0)?;
    let (_shipper, ship) = serve(&src.0, None)?;
    let err = receive_into(&ship, &cache.0, "other")
        .err()
        .ok_or("a stranger was served")?
        .to_string();
    assert!(err.contains("failed authentication"), "{err}");
    let record = cache.0.join(&ship.fingerprint).join(".shipping/received");
    assert_eq!(std::fs::read_to_string(record).unwrap_or_default(), "");
    Ok(())
}

/// Tensor mode: a tensor read by columns arrives as rank 1's runs alone (one item, one
/// sha256), one read by rows as its one run, the others whole.
#[test]
fn a_tensor_part_arrives_as_its_runs_alone() -> TestResult {
    let (src, cache) = (Scratch::new("src-parts")?, Scratch::new("cache-parts")?);
    model(&src.0)?;
    let reads = std::collections::BTreeMap::from([
        ("model.layers.0.a.weight".to_owned(), (0, 2)),
        ("model.layers.1.a.weight".to_owned(), (1, 2)),
    ]);
    let portion = Portion::Parts {
        rank: 1,
        reads: &reads,
    };
    let (_shipper, ship) = serve_portion(&src.0, &portion, None)?;
    let cols = (ship.items.iter())
        .find(|i| i.name == "model.layers.1.a.weight")
        .ok_or("no item")?;
    let strided = cols.strided.ok_or("a column part is not strided")?;
    assert_eq!((cols.len, strided.run, strided.stride), (32, 8, 16));
    let dir = receive_into(&ship, &cache.0, "t")?;
    let ours = std::fs::read(dir.join("model.safetensors"))?;
    let data = ours.len() - 4 * 64;
    // Rows: the second half of tensor 1. Columns: the second 8 bytes of each 16-byte row.
    let rows = &ours[data + 64..data + 128];
    assert!(rows[..32].iter().all(|b| *b == 0) && rows[32..].iter().all(|b| *b == 2));
    for row in ours[data + 128..data + 192].chunks(16) {
        assert!(row[..8].iter().all(|b| *b == 0) && row[8..].iter().all(|b| *b == 3));
    }
    for (i, byte) in [(0, 1), (3, 4)] {
        assert!(ours[data + i * 64..data + (i + 1) * 64]
            .iter()
            .all(|b| *b == byte));
    }
    let share: u64 = ship.items.iter().map(|i| i.len).sum();
    assert_eq!(transfer(&dir)?["share_bytes"].as_u64(), Some(share));
    receive_into(&ship, &cache.0, "t")?;
    assert_eq!(transfer(&dir)?["received_bytes"].as_u64(), Some(0));
    Ok(())
}

/// With one handshake slot, a newer connection ends a worker's unfinished handshake, and the
/// worker is told why (its error names the cause, not a bare reset).
#[test]
fn a_handshake_ended_for_a_newer_one_is_told_why() -> TestResult {
    use std::net::TcpStream;
    use std::time::Duration;

    let src = Scratch::new("src-evict")?;
    model(&src.0)?;
    let (listener, address) = listen("127.0.0.1:1")?;
    let fingerprint = crate::loader::fingerprint(&src.0)?;
    let ship = share(
        &src.0,
        &Portion::Layers {
            layers: 1..2,
            layout: Layout::Model,
        },
        fingerprint,
        address.clone(),
    )?;
    let shares = Shares {
        dir: src.0.clone(),
        by_rank: HashMap::from([(1, ship)]),
        secret: Secret::new(Some("t"), ""),
        corrupt: None,
    };
    let _shipper = Shipper::start_limited(listener, shares, 1)?;
    let worker = TcpStream::connect(&address)?;
    worker.set_read_timeout(Some(Duration::from_secs(10)))?;
    let hello = Hello {
        rank: 1,
        nonce: "n".into(),
    };
    crate::distributed::wire::write_frame(&mut &worker, &hello)?;
    let challenge: Leader = crate::distributed::wire::read_frame(&mut &worker)?;
    assert!(
        matches!(challenge, Leader::Challenge { .. }),
        "{challenge:?}"
    );
    let _stranger = TcpStream::connect(&address)?;
    let err = receive::leader_says(&mut &worker)
        .err()
        .ok_or("the handshake was not ended")?;
    let text = err.to_string();
    assert!(
        text.starts_with("rank 0 refused the connection: rank 0 was handling 1 unauthenticated"),
        "{text}"
    );
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "a refusal worth retrying"
    );
    Ok(())
}
