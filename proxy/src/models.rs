//! `GET /v1/models`: the models the caller's key may invoke, in OpenAI's list format. The
//! candidates are the routes' exact names (a pattern such as `gpt-*` names no model); each is
//! checked against Cedar as it would be dispatched (after aliasing) with an empty request.

use std::sync::Arc;

use bytes::Bytes;
use pingora::Result;
use pingora::proxy::Session;
use serde_json::json;

use crate::respond::{refuse, respond};
use crate::stages::admit::authenticate;
use crate::state::State;
use crate::wire::ApiFamily;

/// Answers the endpoint.
pub async fn models(state: &Arc<State>, session: &mut Session) -> Result<()> {
    let (_, policy) = state.policy.current();
    let caller = match authenticate(&policy.access, &session.req_header().headers) {
        Ok(caller) => caller,
        Err(refusal) => {
            return refuse(
                &state.metrics,
                session,
                ApiFamily::OpenAi,
                "models",
                &refusal,
            )
            .await;
        }
    };
    let mut data = Vec::new();
    for route in &state.config.routes {
        if route.model.contains('*') {
            continue;
        }
        let Some((upstream, dispatched)) = state.config.route(&route.model) else {
            continue;
        };
        let context = json!({"entities": [], "upstream_trust": upstream.trust.name(), "request_bytes": 0, "unscannable": []});
        let verdict = policy.access.decide(
            ("ApiKey", &caller.key_hash),
            "invoke_model",
            ("Model", &dispatched),
            context,
        );
        if verdict.allowed {
            data.push(json!({"id": route.model, "object": "model", "created": 0, "owned_by": upstream.name}));
        }
    }
    state.metrics.request("models", 200);
    let body = json!({"object": "list", "data": data}).to_string();
    respond(session, 200, &[], "application/json", Bytes::from(body)).await
}
