//! Rebuilding the final reply from a stream's events, for the step record.

use std::collections::BTreeMap;

use atdp_schema::ToolCall;
use serde_json::Value;

use super::ApiKind;
use super::response::{
    ResponseView, TokenTrace, anthropic_input_tokens, array_at, assistant, error_type, i64_at,
    parse_response, str_at,
};
use super::sse::SseEvent;

/// Rebuilds a streamed reply: the text and tool calls from their deltas, the finish
/// reason, model and usage from wherever the API puts them. Events that are not JSON, or
/// not of the expected shape, are skipped.
#[derive(Debug)]
pub struct StreamAssembler {
    api: ApiKind,
    view: ResponseView,
    /// Text by (output / content block / choice index, content index).
    texts: BTreeMap<(u64, u64), String>,
    /// Tool calls by tool-call index (chat), output index (responses) or block index
    /// (Anthropic).
    calls: BTreeMap<u64, PartialCall>,
    tokens: TokenTrace,
    /// The whole response a responses-API terminal event carries.
    final_response: Option<Value>,
    /// A message has begun.
    started: bool,
}

#[derive(Debug, Default)]
struct PartialCall {
    call: ToolCall,
    /// Anthropic: the `input` of `content_block_start`, used when no delta follows.
    start_input: Option<Value>,
}

impl StreamAssembler {
    /// An assembler for a stream of `api`.
    pub fn new(api: ApiKind) -> Self {
        StreamAssembler {
            api,
            view: ResponseView::default(),
            texts: BTreeMap::new(),
            calls: BTreeMap::new(),
            tokens: TokenTrace::default(),
            final_response: None,
            started: false,
        }
    }

    /// Takes the next event.
    pub fn push_event(&mut self, event: &SseEvent) {
        if event.is_done() {
            self.view.complete = true;
            return;
        }
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        match self.api {
            ApiKind::OpenAiChat => self.chat(&data),
            ApiKind::OpenAiResponses => self.responses(&data),
            ApiKind::AnthropicMessages => self.anthropic(&data),
        }
    }

    /// The reply as far as the stream went; `complete` says whether it reached its
    /// terminal event.
    pub fn finish(self) -> ResponseView {
        let mut view = self.view;
        if let Some(response) = &self.final_response {
            let whole = parse_response(ApiKind::OpenAiResponses, response);
            return ResponseView {
                model: whole.model.or(view.model),
                error_type: whole.error_type.or(view.error_type),
                complete: true,
                ..whole
            };
        }
        (view.token_ids, view.logprobs) = self.tokens.finish();
        if self.started || !self.texts.is_empty() || !self.calls.is_empty() {
            // Text blocks are joined with a newline, as request blocks are.
            let content = (!self.texts.is_empty())
                .then(|| self.texts.into_values().collect::<Vec<String>>().join("\n"));
            let calls = self.calls.into_values().map(|partial| {
                let mut call = partial.call;
                if call.arguments.is_empty() {
                    if let Some(input) = partial.start_input {
                        call.arguments = input.to_string();
                    }
                } else if self.api.is_anthropic() {
                    // As the non-streamed reply gives it: compact JSON of the input.
                    if let Ok(input) = serde_json::from_str::<Value>(&call.arguments) {
                        call.arguments = input.to_string();
                    }
                }
                call
            });
            view.message = Some(assistant(content, calls.collect()));
        }
        view
    }

    fn chat(&mut self, chunk: &Value) {
        self.note_error(chunk);
        if let Some(model) = str_at(chunk, "model") {
            self.view.model = Some(model);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.view.prompt_tokens = i64_at(usage, "prompt_tokens");
            self.view.completion_tokens = i64_at(usage, "completion_tokens");
        }
        let choices = array_at(chunk, "choices");
        // The record keeps the first choice (`n` = 1 is the norm).
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
            .or_else(|| choices.first())
        else {
            return;
        };
        self.started = true;
        if let Some(delta) = choice.get("delta") {
            for field in ["content", "refusal"] {
                if let Some(text) = delta.get(field).and_then(Value::as_str) {
                    self.texts.entry((0, 0)).or_default().push_str(text);
                }
            }
            for (pos, call) in array_at(delta, "tool_calls").iter().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let entry = &mut self.calls.entry(index).or_default().call;
                fill(&mut entry.id, call.get("id"));
                if let Some(function) = call.get("function") {
                    fill(&mut entry.name, function.get("name"));
                    if let Some(fragment) = function.get("arguments").and_then(Value::as_str) {
                        entry.arguments.push_str(fragment);
                    }
                }
            }
        }
        if let Some(reason) = str_at(choice, "finish_reason") {
            self.view.finish_reason = Some(reason);
        }
        self.tokens.add_choice(choice);
    }

    fn responses(&mut self, event: &Value) {
        let output_index = event
            .get("output_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "response.created" | "response.in_progress" => {
                if let Some(model) = event.get("response").and_then(|r| str_at(r, "model")) {
                    self.view.model = Some(model);
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                self.started = true;
                if let Some(item) = event.get("item") {
                    self.responses_item(output_index, item);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let content_index = event.get("content_index").and_then(Value::as_u64);
                if let Some(delta) = event.get("delta").and_then(Value::as_str) {
                    let key = (output_index, content_index.unwrap_or(0));
                    self.texts.entry(key).or_default().push_str(delta);
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(delta) = event.get("delta").and_then(Value::as_str) {
                    let call = &mut self.calls.entry(output_index).or_default().call;
                    call.arguments.push_str(delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(arguments) = str_at(event, "arguments") {
                    self.calls.entry(output_index).or_default().call.arguments = arguments;
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.view.complete = true;
                self.final_response = event.get("response").cloned();
            }
            "error" => {
                self.view.error_type = str_at(event, "code")
                    .or_else(|| error_type(event))
                    .or_else(|| Some("error".to_owned()));
            }
            _ => {}
        }
    }

    /// An output item as `output_item.added` announces it or `output_item.done` gives it
    /// whole.
    fn responses_item(&mut self, output_index: u64, item: &Value) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let call = &mut self.calls.entry(output_index).or_default().call;
                fill(&mut call.id, item.get("call_id").or_else(|| item.get("id")));
                fill(&mut call.name, item.get("name"));
                if let Some(arguments) = str_at(item, "arguments").filter(|a| !a.is_empty()) {
                    call.arguments = arguments;
                }
            }
            Some("message") => {
                for (pos, part) in array_at(item, "content").iter().enumerate() {
                    let text = part.get("text").or_else(|| part.get("refusal"));
                    if let Some(text) = text.and_then(Value::as_str) {
                        self.texts
                            .insert((output_index, pos as u64), text.to_owned());
                    }
                }
            }
            _ => {}
        }
    }

    fn anthropic(&mut self, event: &Value) {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "message_start" => {
                self.started = true;
                let Some(message) = event.get("message") else {
                    return;
                };
                self.view.model = str_at(message, "model");
                if let Some(usage) = message.get("usage") {
                    self.view.prompt_tokens = anthropic_input_tokens(usage);
                    self.view.completion_tokens = i64_at(usage, "output_tokens");
                }
            }
            "content_block_start" => {
                let Some(block) = event.get("content_block") else {
                    return;
                };
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = str_at(block, "text").unwrap_or_default();
                        self.texts.insert((index, 0), text);
                    }
                    Some("tool_use") => {
                        let partial = self.calls.entry(index).or_default();
                        fill(&mut partial.call.id, block.get("id"));
                        fill(&mut partial.call.name, block.get("name"));
                        partial.start_input = block.get("input").cloned();
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = event.get("delta") else {
                    return;
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            self.texts.entry((index, 0)).or_default().push_str(text);
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some(json) = delta.get("partial_json").and_then(Value::as_str) {
                            let call = &mut self.calls.entry(index).or_default().call;
                            call.arguments.push_str(json);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.view.finish_reason = Some(reason.to_owned());
                }
                if let Some(usage) = event.get("usage") {
                    if let Some(output) = i64_at(usage, "output_tokens") {
                        self.view.completion_tokens = Some(output);
                    }
                    if let Some(input) = anthropic_input_tokens(usage) {
                        self.view.prompt_tokens = Some(input);
                    }
                }
            }
            "message_stop" => self.view.complete = true,
            "error" => self.note_error(event),
            _ => {}
        }
    }

    fn note_error(&mut self, event: &Value) {
        if let Some(kind) = error_type(event) {
            self.view.error_type = Some(kind);
        }
    }
}

/// Sets `target` from a string value, if it is still empty (ids and names come whole, in
/// the first event that has them).
fn fill(target: &mut String, value: Option<&Value>) {
    if target.is_empty()
        && let Some(value) = value.and_then(Value::as_str)
    {
        value.clone_into(target);
    }
}
