//! Chat templates rendered as `transformers` renders them: Jinja with trim/lstrip blocks,
//! loop controls, Python string methods, `raise_exception` and `strftime_now`.

use std::path::Path;

use minijinja::{Environment, ErrorKind, Value as JValue};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};

/// One chat message as the template sees it (extra fields such as `tool_calls` pass through).
#[derive(Debug, Clone, Serialize, Default)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// What a template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct TemplateInput {
    pub messages: Vec<ChatMessage>,
    pub add_generation_prompt: bool,
    /// JSON tool definitions, if any.
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub enable_thinking: Option<bool>,
}

pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// From `tokenizer_config.json` `chat_template` (a string, or named templates), or `chat_template.jinja`.
    pub fn find(dir: &Path, tokenizer_config: &Value) -> Result<Option<ChatTemplate>> {
        let source = match &tokenizer_config["chat_template"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(named) => named
                .iter()
                .find(|t| t["name"] == "default")
                .or_else(|| named.first())
                .and_then(|t| t["template"].as_str())
                .map(str::to_string),
            _ => None,
        };
        let source = match source {
            Some(s) => s,
            None => {
                let file = dir.join("chat_template.jinja");
                if !file.is_file() {
                    return Ok(None);
                }
                std::fs::read_to_string(&file).map_err(Error::io(&file))?
            }
        };
        ChatTemplate::new(source).map(Some)
    }

    pub fn new(source: String) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<JValue, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(ChatTemplate { env, source })
    }

    /// The Jinja source, for detecting think and tool-call tags.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn render(
        &self,
        input: &TemplateInput,
        bos: Option<&str>,
        eos: Option<&str>,
    ) -> Result<String> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| Error::Template(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => input.messages,
            add_generation_prompt => input.add_generation_prompt,
            tools => input.tools.as_ref().map_or(JValue::UNDEFINED, JValue::from_serialize),
            tool_choice => input.tool_choice.as_ref().map_or(JValue::UNDEFINED, JValue::from_serialize),
            enable_thinking => input.enable_thinking.map_or(JValue::UNDEFINED, JValue::from),
            bos_token => bos.unwrap_or(""),
            eos_token => eos.unwrap_or(""),
        };
        template
            .render(ctx)
            .map_err(|e| Error::Template(format!("{e:#}")))
    }
}

/// `strftime_now(format)`: today's date in UTC, for templates that print it (only %d %m %Y %b %B).
fn strftime_now(format: String) -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0) as i64;
    let (y, m, d) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    format
        .replace("%d", &format!("{d:02}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
        .replace("%B", month)
        .replace("%b", &month[..3])
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_chatml_with_generation_prompt() -> Result<()> {
        let t = ChatTemplate::new(
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                .into(),
        )?;
        let input = TemplateInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "Hi".into(),
                ..Default::default()
            }],
            add_generation_prompt: true,
            ..Default::default()
        };
        assert_eq!(
            t.render(&input, None, None)?,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        Ok(())
    }

    #[test]
    fn raise_exception_becomes_an_error() -> Result<()> {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}".into())?;
        let err = t.render(&TemplateInput::default(), None, None).unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
        Ok(())
    }

    #[test]
    fn python_string_methods_work() -> Result<()> {
        let t = ChatTemplate::new(
            "{{ '  x '.strip() }}|{{ 'a,b'.split(',')|length }}|{{ 'ab'.startswith('a') }}".into(),
        )?;
        assert_eq!(
            t.render(&TemplateInput::default(), None, None)?,
            "x|2|True",
            "booleans print as Python does"
        );
        Ok(())
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
    }
}
