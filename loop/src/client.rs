//! An agent's HTTP client: OpenAI chat completions and the atdp rewards API, through
//! `base_url` like any agent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The response header naming the serving version (set by `atdp-serve`, passed on by the
/// proxy).
pub const VERSION_HEADER: &str = "x-atdp-policy-version";

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.to_owned(),
            content: content.into(),
        }
    }

    /// The message as the lake records it (and chat templates render it).
    pub fn to_record(&self) -> atdp_schema::Message {
        atdp_schema::Message {
            role: self.role.clone(),
            content: Some(self.content.clone()),
            ..Default::default()
        }
    }
}

/// A first request as a chat template renders it: messages and the tools offered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prompt {
    /// The messages.
    pub messages: Vec<ChatMessage>,
    /// The tools offered.
    pub tools: Vec<atdp_schema::Tool>,
}

impl From<Vec<ChatMessage>> for Prompt {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Prompt {
            messages,
            tools: Vec::new(),
        }
    }
}

/// What a chat call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The assistant's text.
    pub text: String,
    /// The tool calls of the reply ([`Agent::chat_json`]).
    pub calls: Vec<ToolCallReply>,
    /// Completion tokens (`usage`).
    pub completion_tokens: u64,
    /// `x-atdp-step-id` (through the proxy).
    pub step_id: Option<String>,
    /// `x-atdp-trajectory-id` (through the proxy).
    pub trajectory_id: Option<String>,
    /// The serving version: `x-atdp-policy-version`, else the `model` field.
    pub version: Option<String>,
}

/// A tool call of a reply, as OpenAI's `tool_calls` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallReply {
    /// The call's id, which the tool result names.
    pub id: String,
    /// The function.
    pub name: String,
    /// The arguments, as the JSON text the model wrote.
    pub arguments: String,
}

/// An agent: where it sends calls, its key and the model it asks for.
#[derive(Debug, Clone)]
pub struct Agent {
    http: reqwest::Client,
    /// The API root, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The bearer key (none for a server without authentication).
    pub key: Option<String>,
    /// The `model` field.
    pub model: String,
}

impl Agent {
    /// An agent calling `base_url` (the `/v1` root) with `key`, asking for `model`.
    pub fn new(base_url: &str, key: Option<String>, model: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap_or_default();
        Agent {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            key,
            model: model.to_owned(),
        }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.post(format!("{}{path}", self.base_url));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// One chat completion, sampled at `temperature`, its reply restricted to the regular
    /// expression `pattern` (mistral.rs's `grammar` extension). Any answer but a 200 with a
    /// reply is an error, with the status and the error message.
    pub async fn chat(
        &self,
        messages: &[ChatMessage],
        max_tokens: usize,
        temperature: f64,
        pattern: &str,
    ) -> Result<Reply, String> {
        let body = json!({
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "grammar": {"type": "regex", "value": pattern},
        });
        let (reply, answer) = self.complete(&body).await?;
        answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(|text| Reply {
                text: text.to_owned(),
                ..reply
            })
            .ok_or_else(|| "chat answer has no choices[0].message.content".to_owned())
    }

    /// One chat completion of a request body the caller built (`model` is set here): tools,
    /// tool calls and tool results in `messages`, any sampling field. The reply's text is its
    /// content (empty when it has none); its tool calls are in [`Reply::calls`].
    pub async fn chat_json(&self, mut body: Value) -> Result<Reply, String> {
        body["model"] = json!(self.model);
        let (reply, answer) = self.complete(&body).await?;
        let message = answer
            .pointer("/choices/0/message")
            .ok_or_else(|| "chat answer has no choices[0].message".to_owned())?;
        let calls = message["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|call| ToolCallReply {
                        id: call["id"].as_str().unwrap_or_default().to_owned(),
                        name: call
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: call
                            .pointer("/function/arguments")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Reply {
            text: message["content"].as_str().unwrap_or_default().to_owned(),
            calls,
            ..reply
        })
    }

    /// Posts `body` to `/chat/completions`: the reply's headers and usage, and the answer.
    async fn complete(&self, body: &Value) -> Result<(Reply, Value), String> {
        let response = self
            .post("/chat/completions")
            .json(body)
            .send()
            .await
            .map_err(|e| format!("chat request failed: {e}"))?;
        let status = response.status();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (step_id, trajectory_id, version) = (
            header("x-atdp-step-id"),
            header("x-atdp-trajectory-id"),
            header(VERSION_HEADER),
        );
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("chat answer ({status}) is not JSON: {e}"))?;
        if !status.is_success() {
            let message = answer
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(format!("chat answered {status}: {message}"));
        }
        let reply = Reply {
            text: String::new(),
            calls: Vec::new(),
            completion_tokens: answer
                .pointer("/usage/completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            step_id,
            trajectory_id,
            version: version.or_else(|| answer["model"].as_str().map(str::to_owned)),
        };
        Ok((reply, answer))
    }

    /// Posts a terminal trajectory reward to `POST /v1/atdp/rewards`.
    pub async fn reward(
        &self,
        trajectory_id: &str,
        name: &str,
        value: f64,
        tags: BTreeMap<String, String>,
    ) -> Result<(), String> {
        let body = json!({"rewards": [{
            "trajectory_id": trajectory_id,
            "name": name,
            "value": value,
            "terminal": true,
            "tags": tags,
        }]});
        let response = self
            .post("/atdp/rewards")
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("reward request failed: {e}"))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            let text = response.text().await.unwrap_or_default();
            Err(format!("rewards API answered {status}: {text}"))
        }
    }
}
