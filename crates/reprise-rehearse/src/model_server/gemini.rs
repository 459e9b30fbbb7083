//! The Gemini API as the Gemini CLI calls it: `POST
//! /v1beta/models/<model>:streamGenerateContent?alt=sse` for the
//! conversation (unnamed SSE events, each a `GenerateContentResponse`),
//! `:generateContent` for its side calls (the model router's classifier,
//! checks on the conversation) and `:countTokens`.
//!
//! A side call is answered with the text `{}`: the CLI's router reads no
//! choice from it and keeps the configured model, as when its classifier
//! fails. Side calls are logged and priced but are not turns, so a scenario
//! sees only the conversation.

use serde_json::{Value, json};

use super::cache::InputUsage;
use super::http::Sse;
use super::messages::{Assistant, Summary};

/// What a Gemini path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Stream,
    Side,
    CountTokens,
}

/// Reads `/v1beta/models/<model>:<method>` into the model and the call.
pub(crate) fn route(path: &str) -> Option<(String, Call)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    let call = match method {
        "streamGenerateContent" => Call::Stream,
        "generateContent" => Call::Side,
        "countTokens" => Call::CountTokens,
        _ => return None,
    };
    Some((model.to_owned(), call))
}

/// The last text part of a content, if any.
fn last_text(content: &Value) -> Option<String> {
    content
        .get("parts")?
        .as_array()?
        .iter()
        .rev()
        .find_map(|part| {
            (part.get("thought").and_then(Value::as_bool) != Some(true))
                .then(|| part.get("text")?.as_str().map(str::to_owned))
                .flatten()
        })
}

/// Summarises a `generateContent` body: the roles of `contents`, and the
/// prompt as the last text of the last user content (none when that content
/// holds only function responses: a tool-result follow-up).
pub(crate) fn summarise(body: &Value, model: &str) -> Summary {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_texts = contents
        .iter()
        .filter(|content| content.get("role").and_then(Value::as_str) == Some("user"))
        .map(last_text);
    Summary {
        model: Some(model.to_owned()),
        stream: true,
        roles: contents
            .iter()
            .map(|content| {
                content
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect(),
        last_user_text: user_texts.clone().next_back().flatten(),
        prompt_text: user_texts.flatten().next_back(),
    }
}

/// The prompt blocks Gemini caches, in order: system instruction, tools,
/// then every part of every content.
pub(crate) fn blocks(body: &Value) -> Vec<Value> {
    let mut blocks: Vec<Value> = body.get("systemInstruction").cloned().into_iter().collect();
    blocks.extend(
        body.get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .cloned(),
    );
    for content in body
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match content.get("parts").and_then(Value::as_array) {
            Some(parts) => blocks.extend(parts.iter().cloned()),
            None => blocks.push(content.clone()),
        }
    }
    blocks
}

fn usage(input: &InputUsage, output_tokens: u64) -> Value {
    let prompt = input.fresh + input.cache_read;
    json!({
        "promptTokenCount": prompt,
        "cachedContentTokenCount": input.cache_read,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt + output_tokens,
    })
}

/// A reply's parts: its text, then its function call. The call carries a
/// thought signature, as a Gemini 3 model's first call of a turn does (an
/// opaque token the client must send back with the call): without one the
/// CLI invents a placeholder for its live history that its saved session
/// does not keep, and a resumed session's history then differs from the
/// one the provider cached.
fn parts(assistant: &Assistant<'_>) -> Vec<Value> {
    let mut parts = Vec::new();
    if let Some(text) = assistant.text {
        parts.push(json!({"text": text}));
    }
    if let Some(tool) = assistant.tool {
        let args = match &tool.input {
            Value::String(input) => json!({ "input": input }),
            input => input.clone(),
        };
        parts.push(json!({"functionCall": {"name": tool.name, "args": args},
                          "thoughtSignature": format!("sig-{}", assistant.id)}));
    }
    parts
}

/// The conversation's reply as `alt=sse` events: text pieces first, then
/// the function call and the finish reason with the usage.
pub(crate) fn stream(assistant: &Assistant<'_>) -> Sse {
    let mut sse = Sse::default();
    let response_id = assistant.id.trim_start_matches("msg_").to_owned();
    let output_tokens = assistant.output_tokens();
    let all = parts(assistant);
    let count = all.len();
    for (index, part) in all.into_iter().enumerate() {
        let last = index + 1 == count;
        let mut candidate = json!({"content": {"role": "model", "parts": [part]}, "index": 0});
        if last {
            candidate["finishReason"] = json!("STOP");
        }
        let mut event = json!({
            "candidates": [candidate],
            "modelVersion": assistant.model,
            "responseId": response_id,
        });
        event["usageMetadata"] = usage(&assistant.usage, if last { output_tokens } else { 0 });
        sse.data(&event);
    }
    sse
}

/// A side call's whole answer.
pub(crate) fn side_reply(model: &str, input: &InputUsage) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "{}"}]},
            "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(input, 1),
        "modelVersion": model,
    })
}

/// A Google-style error body.
pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 | 529 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": kind}})
}
