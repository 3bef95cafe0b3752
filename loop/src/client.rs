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
}

/// What a chat call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The assistant's text.
    pub text: String,
    /// Completion tokens (`usage`).
    pub completion_tokens: u64,
    /// `x-atdp-step-id` (through the proxy).
    pub step_id: Option<String>,
    /// `x-atdp-trajectory-id` (through the proxy).
    pub trajectory_id: Option<String>,
    /// The serving version: `x-atdp-policy-version`, else the `model` field.
    pub version: Option<String>,
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
        let response = self
            .post("/chat/completions")
            .json(&body)
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
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("chat answer ({status}) is not JSON: {e}"))?;
        if !status.is_success() {
            let message = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(format!("chat answered {status}: {message}"));
        }
        let text = body
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("chat answer ({status}) has no choices[0].message.content"))?;
        Ok(Reply {
            text: text.to_owned(),
            completion_tokens: body
                .pointer("/usage/completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            step_id,
            trajectory_id,
            version: version.or_else(|| body["model"].as_str().map(str::to_owned)),
        })
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
