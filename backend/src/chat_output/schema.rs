//! The request's tool list as mlx-lm's parsers read it: a function's parameter schemas.

use serde_json::{Map, Value};

/// The `parameters.properties` of the function named `name` (OpenAI's
/// `[{"type": "function", "function": {"name", "parameters"}}]`); empty when the tool list
/// has no such function or it declares none.
pub(crate) fn properties<'a>(
    tools: Option<&'a Value>,
    name: &str,
) -> Option<&'a Map<String, Value>> {
    tools?
        .as_array()?
        .iter()
        .filter_map(|tool| tool.get("function"))
        .find(|f| f.get("name").and_then(Value::as_str) == Some(name))?
        .get("parameters")?
        .get("properties")?
        .as_object()
}

/// The schema of parameter `param` of function `name`, if the tools declare it.
pub(crate) fn parameter<'a>(
    tools: Option<&'a Value>,
    name: &str,
    param: &str,
) -> Option<&'a Value> {
    properties(tools, name)?.get(param)
}
