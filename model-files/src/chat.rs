//! The model's own chat template (Jinja, from `tokenizer_config.json`) rendered with
//! minijinja, and the model's tokenizer: ATDP messages and tools become the prompt text the
//! model saw, and the recorded reply becomes the completion text it produced.

use std::path::Path;

use atdp_schema::{Message, Tool};
use minijinja::{Environment, ErrorKind, context};
use serde_json::{Value, json};
use tokenizers::Tokenizer;

use crate::{Error, Result};

/// The tokenizer file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The tokenizer settings and chat template.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// Default generation settings (stop tokens).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// A model's chat template, end-of-turn token and tokenizer.
#[derive(Debug)]
pub struct ChatFormat {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    tokenizer: Tokenizer,
}

/// A special-token entry of `tokenizer_config.json`: a string or `{"content": ..}`.
fn token_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

impl ChatFormat {
    /// Loads `tokenizer.json` and the `chat_template` and `eos_token` of
    /// `tokenizer_config.json` from a model directory. A list of named templates picks
    /// `default` (else the first).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let text = std::fs::read_to_string(&config_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingFile {
                    path: config_path.clone(),
                    message: "the chat template and end-of-turn token come from it".into(),
                }
            } else {
                Error::io(&config_path, e)
            }
        })?;
        let config: Value =
            serde_json::from_str(&text).map_err(|e| Error::json(&config_path, e))?;
        let template = match config.get("chat_template") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(list)) => {
                let named = |name: &str| {
                    list.iter()
                        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
                };
                named("default")
                    .or_else(|| list.first())
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        Error::Template(format!(
                            "{}: empty `chat_template` list",
                            config_path.display()
                        ))
                    })?
            }
            _ => {
                return Err(Error::Template(format!(
                    "{} has no `chat_template`; a chat model's tokenizer_config.json carries one",
                    config_path.display()
                )));
            }
        };
        let eos_token = config
            .get("eos_token")
            .and_then(token_text)
            .ok_or_else(|| {
                Error::Template(format!(
                    "{} has no `eos_token`; the completion must end with the end-of-turn token",
                    config_path.display()
                ))
            })?;
        let bos_token = config
            .get("bos_token")
            .and_then(token_text)
            .unwrap_or_default();
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        if !tokenizer_path.exists() {
            return Err(Error::MissingFile {
                path: tokenizer_path,
                message: "the model's tokenizer; a Hugging Face model directory carries one".into(),
            });
        }
        let tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
        Self::new(template, bos_token, eos_token, tokenizer)
    }

    /// A chat format from its parts: a Jinja `template`, the beginning- and end-of-turn
    /// tokens' text, and the tokenizer (a model being written, before it has a directory).
    pub fn from_parts(
        template: &str,
        bos_token: &str,
        eos_token: &str,
        tokenizer: Tokenizer,
    ) -> Result<Self> {
        Self::new(
            template.to_owned(),
            bos_token.to_owned(),
            eos_token.to_owned(),
            tokenizer,
        )
    }

    fn new(
        template: String,
        bos_token: String,
        eos_token: String,
        tokenizer: Tokenizer,
    ) -> Result<Self> {
        let mut env = Environment::new();
        // Chat templates are written for Python's Jinja: `message.content.strip()`,
        // `.startswith(...)`, `.split(...)` and the like (Llama 3's and many others').
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        // transformers' `tojson` is Python's `json.dumps` (", " and ": " separators, no
        // HTML escaping); minijinja's own is compact and escapes `<`, `>`, `&`, `'`.
        env.add_filter(
            "tojson",
            |v: minijinja::Value| -> std::result::Result<minijinja::Value, minijinja::Error> {
                let json = serde_json::to_value(&v).map_err(|e| {
                    minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string())
                })?;
                let mut out = String::new();
                python_json(&json, &mut out);
                Ok(minijinja::Value::from_safe_string(out))
            },
        );
        env.add_template_owned("chat", template)
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(ChatFormat {
            env,
            bos_token,
            eos_token,
            tokenizer,
        })
    }

    /// The end-of-turn token's text.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Renders `messages` (and `tools`) as the template does.
    pub fn render(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        let messages: Vec<Value> = messages.iter().map(message_json).collect();
        let tools: Vec<Value> = tools.iter().map(tool_json).collect();
        let tools = (!tools.is_empty()).then_some(tools);
        template
            .render(context! {
                messages => messages,
                tools => tools,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
            })
            .map_err(|e| Error::Template(format!("rendering failed: {e}")))
    }

    /// The prompt (with the generation prompt) and the completion text the template gives
    /// `response` after it: the conversation rendered with the reply, less the prompt, cut
    /// after the end-of-turn token. When the template does not render the reply as a
    /// continuation of the prompt, the reply's text plus the end-of-turn token.
    pub fn prompt_and_completion(
        &self,
        messages: &[Message],
        tools: &[Tool],
        response: &Message,
    ) -> Result<(String, String)> {
        let prompt = self.render(messages, tools, true)?;
        let mut all = messages.to_vec();
        let mut reply = response.clone();
        reply.role = "assistant".into();
        all.push(reply);
        let full = self.render(&all, tools, false)?;
        let completion = match full.strip_prefix(&prompt) {
            Some(rest) => match rest.rfind(&self.eos_token) {
                Some(end) => rest[..end + self.eos_token.len()].to_owned(),
                None => format!("{rest}{}", self.eos_token),
            },
            None => format!(
                "{}{}",
                response.content.as_deref().unwrap_or_default(),
                self.eos_token
            ),
        };
        Ok((prompt, completion))
    }

    /// Token ids of `text`, special tokens in the text recognised, none added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Number of tokens in the tokenizer's vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}

/// `json.dumps(value)` as Python writes it: `", "` and `": "` separators, non-ASCII kept.
fn python_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                python_json(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A message as chat templates expect it (OpenAI shape; tool-call arguments parsed into an
/// object when they are valid JSON).
fn message_json(m: &Message) -> Value {
    let mut v = json!({ "role": m.role, "content": m.content.clone().unwrap_or_default() });
    if let Some(name) = &m.name {
        v["name"] = json!(name);
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let arguments = serde_json::from_str::<Value>(&c.arguments)
                    .unwrap_or_else(|_| Value::String(c.arguments.clone()));
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": arguments}})
            })
            .collect();
        v["tool_calls"] = Value::Array(calls);
    }
    v
}

/// A tool as chat templates expect it: `{"type": "function", "function": {name,
/// description, parameters}}`, the parameters' JSON Schema parsed.
fn tool_json(t: &Tool) -> Value {
    let parameters = t
        .parameters
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let mut function = json!({ "name": t.name, "parameters": parameters });
    if let Some(d) = &t.description {
        function["description"] = json!(d);
    }
    let kind = if t.kind.is_empty() {
        "function"
    } else {
        &t.kind
    };
    json!({ "type": kind, "function": function })
}
