//! The OpenAI Responses API as Codex streams it: what a request says, and the
//! reply as SSE events.

use serde_json::{Value, json};

use super::http::Sse;
use super::messages::{Assistant, Summary, pieces};

/// The last `input_text` of a user input item.
fn last_input_text(item: &Value) -> Option<String> {
    match item.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => parts.iter().rev().find_map(|part| {
            (part.get("type")?.as_str()? == "input_text")
                .then(|| part.get("text")?.as_str().map(str::to_owned))
                .flatten()
        }),
        _ => None,
    }
}

/// Summarises a Responses request body. Roles are the input items' roles, or
/// their type for items without one (`function_call_output`, ...).
pub(crate) fn summarise(body: &Value) -> Summary {
    let items = match body.get("input") {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(text)) => {
            vec![json!({"type": "message", "role": "user", "content": text})]
        }
        _ => Vec::new(),
    };
    let roles: Vec<String> = items
        .iter()
        .map(|item| {
            item.get("role")
                .or_else(|| item.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    let user_texts = items
        .iter()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .map(last_input_text);
    // A tool-call answer after the last user item means no new prompt.
    let follow_up = items.last().and_then(|item| item.get("role")).is_none() && !items.is_empty();
    let last_user_text = if follow_up {
        None
    } else {
        user_texts.clone().next_back().flatten()
    };
    Summary {
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        roles,
        last_user_text,
        prompt_text: user_texts.flatten().next_back(),
    }
}

/// Streams the Responses SSE events for a reply.
pub(crate) fn stream(assistant: &Assistant<'_>) -> Sse {
    let response_id = format!("resp_{}", assistant.id.trim_start_matches("msg_"));
    let mut sse = Sse::default();
    let writer = &mut sse;
    writer.event(
        "response.created",
        &json!({"type": "response.created", "response": {
            "id": response_id, "object": "response", "status": "in_progress",
            "model": assistant.model, "output": [],
        }}),
    );
    let mut output_index = 0;
    if let Some(text) = assistant.text {
        let item_id = assistant.id.clone();
        writer.event(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": output_index,
                "item": {"type": "message", "id": item_id, "role": "assistant",
                    "status": "in_progress", "content": []}}),
        );
        for piece in pieces(text, 16) {
            writer.event(
                "response.output_text.delta",
                &json!({"type": "response.output_text.delta", "item_id": item_id,
                    "output_index": output_index, "content_index": 0, "delta": piece}),
            );
        }
        writer.event(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": output_index,
                "item": {"type": "message", "id": item_id, "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        );
        output_index += 1;
    }
    if let Some(tool) = assistant.tool {
        let suffix = assistant.id.trim_start_matches("msg_");
        let item = match &tool.input {
            Value::String(input) => json!({"type": "custom_tool_call",
                "id": format!("ctc_{suffix}"), "call_id": format!("call_{suffix}"),
                "name": tool.name, "input": input, "status": "completed"}),
            arguments => json!({"type": "function_call", "id": format!("fc_{suffix}"),
                "call_id": format!("call_{suffix}"), "name": tool.name,
                "arguments": arguments.to_string(), "status": "completed"}),
        };
        writer.event(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": output_index,
                "item": item}),
        );
        writer.event(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": output_index,
                "item": item}),
        );
    }
    // Cached tokens are part of the input tokens in this API.
    let input_tokens = assistant.usage.fresh + assistant.usage.cache_read;
    let output_tokens = assistant.output_tokens();
    writer.event(
        "response.completed",
        &json!({"type": "response.completed", "response": {
            "id": response_id, "object": "response", "status": "completed",
            "model": assistant.model,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": assistant.usage.cache_read},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }}),
    );
    sse
}

/// An OpenAI-style error body.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "invalid_api_key",
        429 => "rate_limit_exceeded",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "code": kind}})
}
