//! The top-level request fields each API knows: every parameter of the current official
//! SDKs (`openai` for Python 3.57, `anthropic` for Python 2.14, beta surfaces included) and the
//! sampling parameters older clients still send. A field outside these lists is one the
//! proxy cannot judge (it may switch on something at the provider), so the proxy refuses it
//! towards `external` upstreams unless the policy directory allows it by name
//! (`docs/proxy.md`, "Request fields").

use serde_json::{Map, Value};

use crate::ApiKind;

/// OpenAI `POST /v1/chat/completions`.
pub const OPENAI_CHAT: &[&str] = &[
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// OpenAI `POST /v1/responses` (with the `responses_multi_agent=v1` beta's `multi_agent`).
pub const OPENAI_RESPONSES: &[&str] = &[
    "access_programs",
    "background",
    "background_options",
    "context_management",
    "conversation",
    "image",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "moderation",
    "multi_agent",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// Anthropic `POST /v1/messages`, the beta surface included (`mcp_servers`, `fallbacks`,
/// `thread`, …), and `temperature`, `top_k`, `top_p` of older clients.
pub const ANTHROPIC_MESSAGES: &[&str] = &[
    "billing_policy",
    "cache_control",
    "compaction",
    "container",
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "inference_geo",
    "max_tokens",
    "mcp_servers",
    "messages",
    "metadata",
    "model",
    "output_config",
    "output_format",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "thread",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];

/// The fields `api` knows.
pub fn known_fields(api: ApiKind) -> &'static [&'static str] {
    match api {
        ApiKind::OpenAiChat => OPENAI_CHAT,
        ApiKind::OpenAiResponses => OPENAI_RESPONSES,
        ApiKind::AnthropicMessages => ANTHROPIC_MESSAGES,
    }
}

/// The top-level fields of `obj` that `api` does not know, in the body's order.
pub(crate) fn unknown(api: ApiKind, obj: &Map<String, Value>) -> Vec<String> {
    let known = known_fields(api);
    obj.keys()
        .filter(|key| !known.contains(&key.as_str()))
        .cloned()
        .collect()
}

/// `anthropic-beta` values the current SDK knows.
pub const ANTHROPIC_BETAS: &[&str] = &[
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "output-128k-2025-02-19",
    "mcp-client-2025-04-04",
    "mcp-client-2025-11-20",
    "dev-full-thinking-2025-05-14",
    "interleaved-thinking-2025-05-14",
    "code-execution-2025-05-22",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "model-context-window-exceeded-2025-08-26",
    "fast-mode-2026-02-01",
    "output-300k-2026-03-24",
    "user-profiles-2026-03-24",
    "user-profiles-2026-08-18",
    "user-profiles-2026-09-04",
    "advisor-tool-2026-03-01",
    "managed-agents-2026-04-01",
    "dreaming-2026-04-21",
    "thinking-token-count-2026-05-13",
    "server-side-fallback-2026-06-01",
    "server-side-fallback-2026-07-01",
    "fallback-credit-2026-06-01",
    "fallback-credit-2026-07-01",
    "agent-memory-2026-07-22",
    "mid-conversation-tool-changes-2026-07-01",
    "compact-2026-01-12",
    "computer-use-2025-11-24",
    "mcp-tunnels-2026-06-22",
    "structured-outputs-2025-11-13",
    "task-budgets-2026-03-13",
    "thinking-display-updates-2026-08-18",
    "mid-conversation-output-config-2026-07-01",
    "thinking-binding-controls-2026-08-01",
    "mid-conversation-system-clear-at-2026-08-21",
    "compact-2026-09-04",
    "inline-tools-2026-09-15",
    "mcp-client-2026-09-15",
    "ce-plugins-2026-09-01",
    "spend-limit-reads-2026-09-26",
    "telemetry-destinations-2026-08-11",
    "webhooks-2026-10-07",
    "admin-user-sign-out-2026-10-08",
    "message-threads-2026-08-12",
    "analytics-usage-cost-2026-08-24",
    "experimental-claude-tag-2026-10-21",
    "message-batches-2024-09-24",
    "prompt-caching-2024-07-31",
    "pdfs-2024-09-25",
    "token-counting-2024-11-01",
    "token-efficient-tools-2025-02-19",
    "files-api-2025-04-14",
    "extended-cache-ttl-2025-04-11",
    "skills-2025-10-02",
    "cache-diagnosis-2026-04-07",
    "ce-user-management-2026-07-13",
    "ce-claude-code-managed-settings-2026-10-06",
    "efs-2026-10-01",
    "google-managed-data-controls-2026-09-01",
    "user-profiles-billing-2026-10-01",
];

/// `openai-beta` values the current SDK sends on these APIs.
pub const OPENAI_BETAS: &[&str] = &["responses_multi_agent=v1"];
