//! Real clusters on loopback: rank 0 is the backend binary, ranks 1.. are `worker
//! mlx-distributed` processes joined over MLX's ring; the headline is "sharded equals unsharded".

use integration_tests::cluster::Cluster;
use integration_tests::goldens;
use integration_tests::rpc::{golden_request, load_fixture, stream_text};
use integration_tests::TestResult;

/// Our default CPU mode on the 4-bit fixture equals mlx-lm on its f32 dequantization.
const GOLDENS: &str = "smollm2-135m-4bit-f32";
const MODEL: &str = "smollm2-135m-4bit";

/// Greedy output over gRPC equals the single-node golden for a few cases.
async fn assert_goldens(
    c: &mut backend::grpc::pb::backend_client::BackendClient<tonic::transport::Channel>,
    cases: &[&str],
) -> TestResult {
    let g = goldens::load(GOLDENS)?;
    for name in cases {
        let case = g
            .cases
            .iter()
            .find(|c| c.name == *name)
            .ok_or("no such case")?;
        let reply = c
            .predict(golden_request(case, g.max_tokens))
            .await?
            .into_inner();
        // Predict's message is the trimmed content (streams carry the raw text).
        assert_eq!(
            String::from_utf8(reply.message)?,
            case.text.trim(),
            "case {name}"
        );
        assert_eq!(reply.tokens as usize, case.tokens.len(), "case {name}");
    }
    Ok(())
}

#[tokio::test]
async fn two_rank_pipeline_equals_single_node() -> TestResult {
    let cluster = Cluster::start(2, "pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let loaded = load_fixture(&mut c, MODEL, &[]).await?;
    assert!(loaded.success, "{loaded:?}");
    assert_goldens(&mut c, &["capital-chat", "haiku-plain"]).await?;
    let g = goldens::load(GOLDENS)?;
    let (text, _) = stream_text(&mut c, golden_request(&g.cases[0], g.max_tokens)).await?;
    assert_eq!(text, g.cases[0].text);
    Ok(())
}
