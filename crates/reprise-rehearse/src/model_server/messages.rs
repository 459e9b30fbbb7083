//! The Anthropic Messages API: what a request says, and the reply as a JSON
//! message or as the SSE event sequence Claude Code reads.

use serde_json::{Value, json};

use super::cache::{InputUsage, tokens};
use super::http::Sse;
use super::scenario::ToolCall;

/// What the server notes about a request body, whichever API it speaks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) model: Option<String>,
    pub(crate) stream: bool,
    pub(crate) roles: Vec<String>,
    /// The last prompt text of the last user message, if it has one.
    pub(crate) last_user_text: Option<String>,
    /// The last prompt text of any user message (for tool-result follow-ups).
    pub(crate) prompt_text: Option<String>,
}

/// Claude Code injects these as text blocks; they are not the prompt.
fn is_reminder(text: &str) -> bool {
    text.trim_start().starts_with("<system-reminder>")
}

/// The last text block of a message's content that is not a system reminder.
fn last_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => (!is_reminder(text)).then(|| text.clone()),
        Value::Array(blocks) => blocks.iter().rev().find_map(|block| {
            let text = block.get("text")?.as_str()?;
            (block.get("type")?.as_str()? == "text" && !is_reminder(text)).then(|| text.to_owned())
        }),
        _ => None,
    }
}

/// Summarises a Messages request body.
pub(crate) fn summarise(body: &Value) -> Summary {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_texts = messages
        .iter()
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| last_text(message.get("content").unwrap_or(&Value::Null)));
    let last_user_text = user_texts.clone().next_back().flatten();
    let prompt_text = user_texts.flatten().next_back();
    Summary {
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        roles: messages
            .iter()
            .map(|message| {
                message
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect(),
        last_user_text,
        prompt_text,
    }
}

/// Splits text into pieces of at most `size` bytes on char boundaries, so a
/// client must reassemble the deltas.
pub(crate) fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        out.push(piece);
        rest = tail;
    }
    out
}

/// The output tokens a reply reports: its text and tool input, at least one
/// (the estimator of [`super::cache`]).
pub(crate) fn output_tokens(text: Option<&str>, tool: Option<&ToolCall>) -> u64 {
    let text = text.map_or(0, str::len);
    let tool = tool.map_or(0, |tool| tool.input.to_string().len());
    tokens(text + tool).max(1)
}

/// The reply as built for either API.
#[derive(Debug)]
pub(crate) struct Assistant<'a> {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) usage: InputUsage,
    pub(crate) text: Option<&'a str>,
    pub(crate) tool: Option<&'a ToolCall>,
}

impl Assistant<'_> {
    pub(crate) fn output_tokens(&self) -> u64 {
        output_tokens(self.text, self.tool)
    }

    fn stop_reason(&self) -> &'static str {
        if self.tool.is_some() {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    /// A tool's input as the Messages API carries it: always an object.
    fn tool_input(tool: &ToolCall) -> Value {
        match &tool.input {
            Value::String(input) => json!({ "input": input }),
            input => input.clone(),
        }
    }

    fn tool_id(&self) -> String {
        format!("toolu_{}", self.id.trim_start_matches("msg_"))
    }

    /// Usage as the Messages API reports it: `input_tokens` is only the
    /// input after the last cache breakpoint.
    fn usage(&self, output_tokens: u64) -> Value {
        let usage = &self.usage;
        json!({
            "input_tokens": usage.fresh,
            "cache_creation_input_tokens": usage.cache_write + usage.cache_write_1h,
            "cache_read_input_tokens": usage.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage.cache_write,
                "ephemeral_1h_input_tokens": usage.cache_write_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        })
    }

    /// The non-streaming message object.
    pub(crate) fn message(&self) -> Value {
        let mut content = Vec::new();
        if let Some(text) = self.text {
            content.push(json!({"type": "text", "text": text}));
        }
        if let Some(tool) = self.tool {
            content.push(json!({
                "type": "tool_use", "id": self.tool_id(), "name": tool.name,
                "input": Self::tool_input(tool),
            }));
        }
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": self.stop_reason(), "stop_sequence": null,
            "usage": self.usage(self.output_tokens()),
        })
    }

    /// Streams the Messages SSE events.
    pub(crate) fn stream(&self) -> Sse {
        let mut sse = Sse::default();
        let writer = &mut sse;
        writer.event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": self.usage(1),
            }}),
        );
        let mut index = 0;
        if let Some(text) = self.text {
            let start = json!({"type": "text", "text": ""});
            let deltas = pieces(text, 16)
                .into_iter()
                .map(|piece| json!({"type": "text_delta", "text": piece}))
                .collect();
            block(writer, index, start, deltas);
            index += 1;
        }
        if let Some(tool) = self.tool {
            let start =
                json!({"type": "tool_use", "id": self.tool_id(), "name": tool.name, "input": {}});
            let input = Self::tool_input(tool).to_string();
            let deltas = pieces(&input, 16)
                .into_iter()
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect();
            block(writer, index, start, deltas);
        }
        // The final usage repeats the input figures, as the API does.
        writer.event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
                "usage": self.usage(self.output_tokens())}),
        );
        writer.event("message_stop", &json!({"type": "message_stop"}));
        sse
    }
}

fn block(writer: &mut Sse, index: usize, start: Value, deltas: Vec<Value>) {
    writer.event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": start}),
    );
    for delta in deltas {
        writer.event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
    }
    writer.event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    );
}

/// An Anthropic-style error body.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
