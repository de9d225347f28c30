//! Constrained decoding over real gRPC with the 4-bit SmolLM2: GBNF grammars in the shapes
//! LocalAI generates (JSON mode, a JSON-schema object, a tool call), lazy trigger words, rows
//! with and without grammars in one batch, a bad grammar, and a 2-rank pipeline.

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::grammars::JSON_OBJECT;
use integration_tests::rpc::{chat_request, load_fixture, stream_text};
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use tonic::transport::Channel;
use tonic::Code;

const MODEL: &str = "smollm2-135m-4bit";

/// An object with a string `name` and an integer `age`, in the shape of LocalAI's
/// JSON-schema converter (properties in order, `space` between tokens), with the string and
/// integer bounded (`maxLength`, `maximum`) so that a 135M model's answer ends within the
/// token budget.
const PERSON: &str = r#"space ::= " "?
string ::= "\"" [a-zA-Z ]{1,24} "\"" space
integer ::= ("-"? ([0-9] | [1-9] [0-9]{0,2})) space
root ::= "{" space "\"name\"" space ":" space string "," space "\"age\"" space ":" space integer "}" space
"#;

/// A tool call as LocalAI's function grammars write one: a JSON object naming the function
/// and its arguments.
const TOOL_CALL: &str = r#"root ::= "{" space "\"name\"" space ":" space "\"get_weather\"" space "," space "\"arguments\"" space ":" space args "}" space
args ::= "{" space "\"city\"" space ":" space string "}" space
string ::= "\"" [a-zA-Z ]{1,30} "\"" space
space ::= " "?
"#;

fn chat(prompt: &str, grammar: &str, tokens: i32) -> pb::PredictOptions {
    pb::PredictOptions {
        grammar: grammar.into(),
        ..chat_request(prompt, tokens)
    }
}

async fn predict(c: &mut BackendClient<Channel>, req: pb::PredictOptions) -> TestResult<String> {
    let reply = c.predict(req).await?.into_inner();
    Ok(String::from_utf8(reply.message)?)
}

/// The output parses as JSON (an object), whole.
fn object(text: &str) -> TestResult<serde_json::Map<String, serde_json::Value>> {
    let value: serde_json::Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("not JSON ({e}): {text:?}"))?;
    Ok(value
        .as_object()
        .cloned()
        .ok_or_else(|| format!("not an object: {text:?}"))?)
}

#[tokio::test]
async fn grammars_constrain_every_output_to_parse() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let loaded = load_fixture(&mut c, MODEL, &[]).await?;
    assert!(loaded.success, "{loaded:?}");

    // JSON mode lets a small model nest without end: within 24 tokens it has begun an object.
    let json = predict(&mut c, chat("Describe Paris as JSON.", JSON_OBJECT, 24)).await?;
    assert!(json.starts_with('{'), "{json:?}");

    let person = predict(&mut c, chat("Who are you? Answer as JSON.", PERSON, 64)).await?;
    let person = object(&person)?;
    assert!(
        person["name"].is_string() && person["age"].is_i64(),
        "{person:?}"
    );

    let call = predict(&mut c, chat("What is the weather in Paris?", TOOL_CALL, 64)).await?;
    let call = object(&call)?;
    assert_eq!(call["name"], "get_weather");
    assert!(call["arguments"]["city"].is_string(), "{call:?}");

    // Predict and PredictStream agree under a grammar too.
    let (streamed, _) =
        stream_text(&mut c, chat("Describe Paris as JSON.", JSON_OBJECT, 24)).await?;
    assert_eq!(streamed, json);
    Ok(())
}

#[tokio::test]
async fn a_bad_grammar_is_invalid_argument_naming_its_position() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let cases = [
        (
            "root ::= \"a\"\nitem ::= [a-z",
            "line 2, column 14: unterminated character class",
        ),
        (
            "root ::= thing",
            "line 1, column 10: rule `thing` is not defined",
        ),
    ];
    for (grammar, expected) in cases {
        let err = c.predict(chat("Hi", grammar, 8)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(expected), "{}", err.message());
    }
    Ok(())
}

/// With trigger words the grammar is lazy: the text before the first trigger is the model's
/// own (the unconstrained answer's prefix), and from the trigger on it follows the grammar.
#[tokio::test]
async fn trigger_words_make_the_grammar_lazy() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    // Unconstrained, this begins "In the ethereal sea, a mystifying ...".
    let question = "Write a haiku about the sea.";
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let free = predict(&mut c, chat(question, "", 32)).await?;
    let at = free.find("sea").ok_or(format!("no sea in {free:?}"))?;

    let req = pb::ModelOptions {
        model: integration_tests::fixture(MODEL)?
            .to_string_lossy()
            .into_owned(),
        grammar_triggers: vec![pb::GrammarTrigger { word: "sea".into() }],
        ..Default::default()
    };
    assert!(c.load_model(req).await?.into_inner().success);
    let grammar = "root ::= \"sea\" \" is \" (\"blue\" | \"deep\" | \"calm\") \".\"";
    let lazy = predict(&mut c, chat(question, grammar, 32)).await?;
    assert_eq!(
        lazy[..at],
        free[..at],
        "the text before the trigger is the model's own"
    );
    let rest = &lazy[at..];
    assert!(
        ["sea is blue.", "sea is deep.", "sea is calm."].contains(&rest),
        "{lazy:?}"
    );
    Ok(())
}

/// Rows with different grammars, and a row with none, share the batch: each follows its own,
/// and the free row's text is what it is alone.
#[tokio::test]
async fn rows_with_and_without_grammars_share_a_batch() -> TestResult {
    grammars_share_a_batch(&[]).await
}

/// As above on the integer path (the CPU default).
#[tokio::test]
async fn rows_with_and_without_grammars_share_a_batch_in_int8() -> TestResult {
    grammars_share_a_batch(&[("MLX_DISTRIBUTED_CPU_NUMERICS", "")]).await
}

async fn grammars_share_a_batch(env: &[(&str, &str)]) -> TestResult {
    let server = BackendProcess::start(env).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let free_req = chat("Write a haiku about the sea.", "", 48);
    let alone = predict(&mut c, free_req.clone()).await?;
    let (mut a, mut b, mut d) = (c.clone(), c.clone(), c.clone());
    let (free, person, call) = tokio::join!(
        predict(&mut a, free_req),
        predict(&mut b, chat("Who are you? Answer as JSON.", PERSON, 64)),
        predict(&mut d, chat("What is the weather in Paris?", TOOL_CALL, 64)),
    );
    assert_eq!(free?, alone);
    let person = object(&person?)?;
    assert!(person["age"].is_i64(), "{person:?}");
    assert_eq!(object(&call?)?["name"], "get_weather");
    Ok(())
}

/// On a 2-rank pipeline the grammar runs on rank 0's side of the step plan: the same
/// constrained output as on one node.
#[tokio::test]
async fn a_pipeline_gives_the_same_constrained_output() -> TestResult {
    let single = {
        let server = BackendProcess::start(&[]).await?;
        let mut c = server.client().await?;
        assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
        predict(&mut c, chat("Who are you? Answer as JSON.", PERSON, 64)).await?
    };
    let cluster = Cluster::start(2, "grammar-pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let piped = predict(&mut c, chat("Who are you? Answer as JSON.", PERSON, 64)).await?;
    assert_eq!(piped, single);
    object(&piped)?;
    Ok(())
}
