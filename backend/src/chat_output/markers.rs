//! ModelMetadata's description of a tool-call format (LocalAI's `ToolFormatMarkers`, the
//! fields llama.cpp's template analysis fills), for the formats those fields can describe.

use super::ToolFormat;

/// The markers of one format; empty fields do not apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    /// `json_native`, `tag_with_json` or `tag_with_tagged`.
    pub format_type: &'static str,
    pub section_start: &'static str,
    pub section_end: &'static str,
    pub per_call_start: &'static str,
    pub per_call_end: &'static str,
    pub func_name_prefix: &'static str,
    pub func_name_suffix: &'static str,
    pub func_close: &'static str,
    pub arg_name_prefix: &'static str,
    pub arg_name_suffix: &'static str,
    pub arg_value_prefix: &'static str,
    pub arg_value_suffix: &'static str,
    pub name_field: &'static str,
    pub args_field: &'static str,
}

impl ToolFormat {
    /// The format's markers; `None` for Kimi's ids, Mistral's two forms and Python calls,
    /// which these fields do not describe.
    pub fn markers(self) -> Option<Markers> {
        let calls = Markers {
            per_call_start: self.start(),
            per_call_end: self.end(),
            ..Default::default()
        };
        match self {
            ToolFormat::JsonTools => Some(Markers {
                format_type: "json_native",
                name_field: "name",
                args_field: "arguments",
                ..calls
            }),
            ToolFormat::Qwen3Coder => Some(Markers {
                format_type: "tag_with_tagged",
                func_name_prefix: "<function=",
                func_name_suffix: ">",
                func_close: "</function>",
                arg_name_prefix: "<parameter=",
                arg_name_suffix: ">",
                arg_value_suffix: "</parameter>",
                ..calls
            }),
            ToolFormat::Glm47 => Some(Markers {
                format_type: "tag_with_tagged",
                arg_name_prefix: "<arg_key>",
                arg_name_suffix: "</arg_key>",
                arg_value_prefix: "<arg_value>",
                arg_value_suffix: "</arg_value>",
                ..calls
            }),
            ToolFormat::MinimaxM2 => Some(Markers {
                format_type: "tag_with_tagged",
                section_start: self.start(),
                section_end: self.end(),
                per_call_start: "",
                per_call_end: "",
                func_name_prefix: "<invoke name=\"",
                func_name_suffix: "\">",
                func_close: "</invoke>",
                arg_name_prefix: "<parameter name=\"",
                arg_name_suffix: "\">",
                arg_value_suffix: "</parameter>",
                ..Default::default()
            }),
            ToolFormat::KimiK2
            | ToolFormat::Mistral
            | ToolFormat::Pythonic
            | ToolFormat::Harmony => None,
        }
    }
}
