//! Detection in mlx-lm's order, and each family's output split while streaming.

use serde_json::{json, Value};

use super::detect::mlx_parser;
use super::*;

fn no_vocab(_: &str) -> bool {
    false
}

fn detect(template: &str) -> OutputFormat {
    OutputFormat::detect(Some(template), &no_vocab)
}

/// Snippets of each family's template, after the real ones.
const QWEN3: &str = r#"{%- if tools %}<tools>...</tools> <tool_call>\n{"name": <function-name>, ...}</tool_call>
{%- for tool_call in message.tool_calls %}{{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}{%- endfor %}
{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0] %}{{ '<think>\n' }}"#;
const QWEN35: &str = r#"{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}{{- '<parameter=' + args_name + '>\n' }}
{{- '<|im_start|>assistant\n<think>\n' }}"#;
const GLM46: &str = r#"<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
{{ '\n<tool_call>' + tc.name }}{{ '\n<think>' + reasoning_content.strip() + '</think>'}}"#;
const KIMI_K2: &str = r#"<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}<|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>
<think>{{rc}}</think>"#;
const MAGISTRAL: &str = r#"{{- '[THINK]' + block['thinking'] + '[/THINK]' }}{{- '[TOOL_CALLS]' + tool_call.function.name + '[ARGS]' + arguments }}"#;
const MISTRAL_SMALL_31: &str = r#"{{- "[TOOL_CALLS] [" }}{%- for tool_call in tool_calls %}"#;
const MINIMAX_M2: &str = r#"{%- set toolcall_begin_token = '<minimax:tool_call>' -%}<invoke name="tool-name-1">
{{- '<think>' ~ '\n' ~ reasoning_content ~ '\n' ~ '</think>' ~ '\n\n' }}"#;
const LFM2: &str = r#"<|tool_list_start|>{{ tools }}<|tool_list_end|><|tool_call_start|>"#;
const GEMMA3: &str =
    r#"{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"#;
const GLM4_0414: &str = r#"<|assistant|>{{ m.metadata }}\n{{ m.content }}<|observation|>"#;

#[test]
fn each_family_template_picks_its_format() {
    let cases = [
        (QWEN3, Some(ToolFormat::JsonTools), Some("<think>")),
        (QWEN35, Some(ToolFormat::Qwen3Coder), Some("<think>")),
        (GLM46, Some(ToolFormat::Glm47), Some("<think>")),
        (KIMI_K2, Some(ToolFormat::KimiK2), Some("<think>")),
        (MAGISTRAL, Some(ToolFormat::Mistral), Some("[THINK]")),
        (MISTRAL_SMALL_31, Some(ToolFormat::Mistral), None),
        (MINIMAX_M2, Some(ToolFormat::MinimaxM2), Some("<think>")),
        (LFM2, Some(ToolFormat::Pythonic), None),
        (GEMMA3, None, None),
        (GLM4_0414, None, None),
    ];
    for (template, tools, think) in cases {
        let f = detect(template);
        assert_eq!(f.tools, tools, "{template}");
        assert_eq!(f.think.map(|t| t.0).as_deref(), think, "{template}");
    }
}

#[test]
fn detection_follows_mlx_lm_order() {
    let cases = [
        (
            "<minimax:tool_call> <arg_key> [TOOL_CALLS]",
            Some("minimax_m2"),
        ),
        ("<|tool_call> <tool_call|> <arg_key>", Some("gemma4")),
        ("<start_function_call> <arg_key>", Some("function_gemma")),
        ("<longcat_tool_call> <arg_key>", Some("longcat")),
        (
            "<tool_call>\\n<function= <arg_key> tool_call.name",
            Some("glm47"),
        ),
        (
            "<|tool_call_start|> <tool_call>\n<function=",
            Some("pythonic"),
        ),
        (
            "<tool_call>\n<function= <|tool_calls_section_begin|>",
            Some("qwen3_coder"),
        ),
        ("<|tool_calls_section_begin|> [TOOL_CALLS]", Some("kimi_k2")),
        (
            "<function name=\" <param name=\" [TOOL_CALLS]",
            Some("minicpm5"),
        ),
        ("[TOOL_CALLS] <tool_call> tool_call.name", Some("mistral")),
        (
            "<atem:function_calls> <tool_call> tool_call.name",
            Some("muse_spark"),
        ),
        ("<tool_call> tool_call.name", Some("json_tools")),
        ("<tool_call> tool_call['name']", None),
        ("<function name=\" only", None),
        ("plain", None),
    ];
    for (template, want) in cases {
        assert_eq!(mlx_parser(Some(template), &no_vocab), want, "{template}");
    }
    // Formats mlx-lm has and this backend does not parse stay content.
    assert_eq!(detect("<|tool_call> <tool_call|>").tools, None);
}

#[test]
fn the_vocabulary_decides_when_the_template_does_not() {
    let lfm = |t: &str| matches!(t, "<|tool_call_start|>" | "<|tool_call_end|>");
    assert_eq!(mlx_parser(Some("plain"), &lfm), Some("pythonic"));
    assert_eq!(
        OutputFormat::detect(None, &lfm).tools,
        Some(ToolFormat::Pythonic)
    );
    let xtml = |t: &str| matches!(t, "<|open|>" | "<|close|>" | "<|sep|>" | "<|end_of_msg|>");
    assert_eq!(mlx_parser(None, &xtml), Some("kimi_k3"));
    let think = |t: &str| matches!(t, "<think>" | "</think>");
    assert_eq!(
        OutputFormat::detect(Some("plain"), &think).think,
        Some(("<think>".into(), "</think>".into()))
    );
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])
}

/// The output of `text` pushed in `pieces`, everything collected.
fn run(format: &OutputFormat, prompt: &str, pieces: &[&str]) -> Split {
    let mut s = OutputSplitter::new(format, prompt, Some(tools()));
    let mut all = Split::default();
    for piece in pieces {
        all.extend(s.push(piece));
    }
    all.extend(s.finish());
    all
}

/// What a client needs of a call (ids are fresh unless the model gives one).
fn calls(split: &Split) -> Vec<(usize, String, String)> {
    let calls = split.calls.iter();
    calls
        .map(|c| (c.index, c.name.clone(), c.arguments.clone()))
        .collect()
}

/// Every split of `output` in two, and one character at a time, gives the whole's result.
fn same_at_every_boundary(format: &OutputFormat, prompt: &str, output: &str) -> Split {
    let whole = run(format, prompt, &[output]);
    let bounds = (0..=output.len()).filter(|&i| output.is_char_boundary(i));
    for i in bounds {
        let two = run(format, prompt, &[&output[..i], &output[i..]]);
        assert_eq!(
            (&two.content, &two.reasoning),
            (&whole.content, &whole.reasoning),
            "split at {i}"
        );
        assert_eq!(calls(&two), calls(&whole), "split at {i}");
    }
    let chars: Vec<String> = output.chars().map(String::from).collect();
    let one_by_one: Vec<&str> = chars.iter().map(String::as_str).collect();
    let each = run(format, prompt, &one_by_one);
    assert_eq!(
        (&each.content, calls(&each)),
        (&whole.content, calls(&whole))
    );
    whole
}

fn call(index: usize, name: &str, arguments: &str) -> (usize, String, String) {
    (index, name.into(), arguments.into())
}

#[test]
fn each_family_output_streams_without_markup_in_the_content() {
    let paris = r#"{"city": "Paris"}"#;
    let cases = [
        (QWEN3, "<|im_start|>assistant\n",
         "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "\n\n", "\nThe user wants weather.\n", vec![call(0, "get_weather", paris)]),
        (QWEN35, "<|im_start|>assistant\n<think>\n",
         "Check the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
         "\n\n", "Check the weather.\n", vec![call(0, "get_weather", r#"{"city": "Paris", "days": 3}"#)]),
        (GLM46, "<|user|>\nweather?<|assistant|>",
         "\n<think>Need the weather.</think>\nLet me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
         "\n\nLet me check.\n", "Need the weather.", vec![call(0, "get_weather", r#"{"city": "Paris", "days": 2}"#)]),
        (KIMI_K2, "<|im_assistant|>assistant<|im_middle|>",
         "<think>weather</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
         "Checking.", "weather", vec![call(0, "get_weather", paris), call(1, "now", "{}")]),
        (MAGISTRAL, "[INST]weather?[/INST]",
         "[THINK]weather in Paris[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}",
         "Sure.", "weather in Paris", vec![call(0, "get_weather", paris), call(1, "now", "{}")]),
        (MISTRAL_SMALL_31, "[INST]weather?[/INST]",
         "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
         "", "", vec![call(0, "get_weather", paris)]),
        (MINIMAX_M2, "]~b]ai\n<think>\n",
         "weather\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">5</parameter>\n</invoke>\n</minimax:tool_call>",
         "\n\n", "weather\n", vec![call(0, "get_weather", r#"{"city": "Paris", "days": 5}"#)]),
        (LFM2, "<|im_start|>assistant\n",
         "<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>Checking.",
         "Checking.", "", vec![call(0, "get_weather", paris)]),
    ];
    for (template, prompt, output, content, reasoning, want) in cases {
        let f = detect(template);
        let got = same_at_every_boundary(&f, prompt, output);
        assert_eq!(
            (got.content.as_str(), got.reasoning.as_str()),
            (content, reasoning),
            "{output}"
        );
        assert_eq!(calls(&got), want, "{output}");
    }
}

#[test]
fn model_ids_are_kept_and_others_are_fresh() {
    let got = run(&detect(KIMI_K2), "", &["<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"]);
    assert_eq!(got.calls[0].id, "functions.f:0");
    let got = run(
        &detect(QWEN3),
        "",
        &["<tool_call>{\"name\": \"f\"}</tool_call>"],
    );
    assert!(got.calls[0].id.starts_with("call_") && got.calls[0].id.len() == 29);
}

#[test]
fn a_call_inside_reasoning_ends_the_reasoning() {
    let f = detect(QWEN3);
    let got = same_at_every_boundary(
        &f,
        "",
        "<think>hmm <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>after",
    );
    assert_eq!(
        (got.reasoning.as_str(), got.content.as_str()),
        ("hmm ", "after")
    );
    assert_eq!(calls(&got), vec![call(0, "f", "{}")]);
}

#[test]
fn malformed_calls_come_back_as_content() {
    let cases = [
        (
            QWEN3,
            "Sure. <tool_call>bad</tool_call> ok",
            "Sure. <tool_call>bad</tool_call> ok",
        ),
        (
            QWEN3,
            "<tool_call>{\"name\": \"f\"",
            "<tool_call>{\"name\": \"f\"",
        ),
        (
            QWEN35,
            "<tool_call>\n<function=f>\n<parameter=a>\n1",
            "<tool_call>\n<function=f>\n<parameter=a>\n1",
        ),
        (
            KIMI_K2,
            "<|tool_calls_section_begin|>junk<|tool_calls_section_end|>x",
            "<|tool_calls_section_begin|>junk<|tool_calls_section_end|>x",
        ),
        (
            MAGISTRAL,
            "ok[TOOL_CALLS]f[ARGS]{\"a\": ",
            "ok[TOOL_CALLS]f[ARGS]{\"a\": ",
        ),
        (
            MINIMAX_M2,
            "<minimax:tool_call>\n<invoke name=\"f\">",
            "<minimax:tool_call>\n<invoke name=\"f\">",
        ),
        (
            LFM2,
            "<|tool_call_start|>nothing<|tool_call_end|>",
            "<|tool_call_start|>nothing<|tool_call_end|>",
        ),
    ];
    for (template, output, content) in cases {
        let got = same_at_every_boundary(&detect(template), "", output);
        assert_eq!(
            (got.content.as_str(), got.calls.len()),
            (content, 0),
            "{output}"
        );
    }
    // Cut short but complete, a call still parses (as mlx-lm parses a call open at the end).
    let got = run(
        &detect(QWEN3),
        "",
        &["<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}"],
    );
    assert_eq!(calls(&got), vec![call(0, "f", r#"{"a": 1}"#)]);
}

#[test]
fn hostile_text_never_panics_and_splits_agree() {
    let texts = [
        "<tool_call><tool_call></tool_call></tool_call>",
        "</tool_call><think></think></think>",
        "<tool_ca<tool_call>é{\"name\":\"ü\"}</tool_callé",
        "[TOOL_CALLS][TOOL_CALLS][ARGS]{}[ARGS]",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.:0<|tool_call_argument_begin|>",
        "<minimax:tool_call><invoke name=><parameter name=>></parameter></invoke>",
        "<|tool_call_start|>[a(b=[1,(2,{3:'x'}),],)]<|tool_call_end|>[THINK]日本[/THINK]",
        "<tool_call>x<arg_key><arg_value></arg_value></arg_key></tool_call>\u{0}",
    ];
    let templates = [
        QWEN3, QWEN35, GLM46, KIMI_K2, MAGISTRAL, MINIMAX_M2, LFM2, GEMMA3,
    ];
    for template in templates {
        for text in texts {
            same_at_every_boundary(&detect(template), "<think>", text);
        }
    }
}

#[test]
fn prompt_ending_inside_reasoning_starts_in_reasoning() {
    let f = detect(QWEN3);
    let got = run(&f, "assistant\n<think>\n", &["hmm</think>ok"]);
    assert_eq!(
        (got.reasoning.as_str(), got.content.as_str()),
        ("hmm", "ok")
    );
    // A closed block in the history does not.
    let got = run(
        &f,
        "<think>old</think>answer<|im_start|>assistant\n",
        &["ok"],
    );
    assert_eq!(got.content, "ok");
}

#[test]
fn without_markers_everything_is_content() {
    let f = detect(GEMMA3);
    let got = run(
        &f,
        "",
        &["<think>x</think><tool_call>{\"name\": \"f\"}</tool_call> <t"],
    );
    assert_eq!(
        got.content,
        "<think>x</think><tool_call>{\"name\": \"f\"}</tool_call> <t"
    );
    assert!(got.calls.is_empty() && got.reasoning.is_empty());
}

#[test]
fn markers_describe_the_formats_they_can() {
    let m = ToolFormat::JsonTools.markers();
    assert_eq!(
        m.map(|m| (m.format_type, m.per_call_start)),
        Some(("json_native", "<tool_call>"))
    );
    assert_eq!(
        ToolFormat::Glm47.markers().map(|m| m.arg_name_prefix),
        Some("<arg_key>")
    );
    assert_eq!(ToolFormat::KimiK2.markers(), None);
    for f in ToolFormat::ALL {
        assert_eq!(ToolFormat::from_name(f.name()), Some(f));
    }
}

/// gpt-oss's chat template (harmony): its channel and message markers.
const GPT_OSS: &str = r#"{{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
{{- "<|start|>assistant to=" + "functions." + tool_call.name + "<|channel|>commentary json<|message|>" }}"#;

#[test]
fn harmony_is_found_by_its_template_or_tokens() {
    let f = detect(GPT_OSS);
    assert_eq!(f.tools, Some(ToolFormat::Harmony));
    assert_eq!(
        f.think.map(|t| t.0).as_deref(),
        Some("<|channel|>analysis<|message|>")
    );
    let vocab = |t: &str| matches!(t, "<|start|>" | "<|channel|>" | "<|message|>" | "<|call|>");
    assert_eq!(
        OutputFormat::detect(None, &vocab).tools,
        Some(ToolFormat::Harmony)
    );
    assert_eq!(ToolFormat::Harmony.markers(), None);
}

#[test]
fn harmony_streams_reasoning_calls_and_content_apart() {
    let format = detect(GPT_OSS);
    let prompt = "<|start|>user<|message|>weather?<|end|><|start|>assistant";
    let output = "<|channel|>analysis<|message|>Need the weather.<|end|>\
                  <|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>\
                  <|start|>assistant<|channel|>commentary to=functions.get_weather \
                  <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>\
                  <|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}";
    let got = same_at_every_boundary(&format, prompt, output);
    assert_eq!(got.reasoning, "Need the weather.");
    assert_eq!(got.content, "Checking.");
    let paris = r#"{"city": "Paris"}"#;
    assert_eq!(
        calls(&got),
        [call(0, "get_weather", paris), call(1, "now", "{}")]
    );
    let bad = "<|channel|>commentary to=functions.f<|message|>{oops";
    let got = run(&format, prompt, &[bad]);
    assert!(got.calls.is_empty());
    assert_eq!(got.content, bad);
}
