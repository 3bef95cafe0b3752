//! Admit: who is calling, and whether the proxy takes the call now. In order: the API key
//! (401), the tenant's and key's token and request buckets (429), the key's calls in flight
//! (429), the lake's back-pressure (503, or served unrecorded when so configured).

use atdp_policies::{AccessPolicy, KeyIdentity, hash_api_key};
use http::HeaderMap;
use http::header;

use crate::config::{Limits, OnBackpressure};
use crate::limits::{InFlightSlot, RateLimiter};
use crate::metrics::Metrics;
use crate::refusal::Refusal;

/// The caller, once its key is known.
#[derive(Debug, Clone)]
pub struct Caller {
    /// SHA-256 of the key (the Cedar `ApiKey` id).
    pub key_hash: String,
    /// Its agent and tenant.
    pub identity: KeyIdentity,
}

impl Caller {
    /// The names of the caller's token buckets: its key's and its tenant's.
    pub fn token_buckets(&self) -> (String, String) {
        (
            format!("key-tokens:{}", self.key_hash),
            tenant_token_bucket(&self.identity.tenant),
        )
    }
}

/// The name of a tenant's token bucket.
pub fn tenant_token_bucket(tenant: &str) -> String {
    format!("tokens:{tenant}")
}

/// Finds and checks the API key: `Authorization: Bearer …` or `x-api-key`.
pub fn authenticate(access: &AccessPolicy, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key);
    let key = bearer
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or(Refusal::MissingApiKey)?;
    let key_hash = hash_api_key(key);
    let identity = access
        .key_identity(&key_hash)
        .ok_or(Refusal::InvalidApiKey)?;
    if !identity.active {
        return Err(Refusal::ApiKeyRevoked);
    }
    Ok(Caller { key_hash, identity })
}

/// Takes the call from the caller's rate limits: tokens are only checked (they are charged
/// once the reply reports them); then the tenant's and the key's request buckets are taken
/// from, the tenant's given back when the key's refuses.
pub fn take_rate(limiter: &RateLimiter, limits: &Limits, caller: &Caller) -> Result<(), Refusal> {
    let wait = |retry_after| Refusal::RateLimited { retry_after };
    let (key_tokens, tenant_tokens) = caller.token_buckets();
    limiter
        .check(&tenant_tokens, limits.tenant_tokens_per_minute)
        .map_err(wait)?;
    limiter
        .check(&key_tokens, limits.key_tokens_per_minute)
        .map_err(wait)?;
    let tenant_bucket = format!("tenant:{}", caller.identity.tenant);
    let tenant_rate = u64::from(limits.tenant_requests_per_minute);
    limiter.take(&tenant_bucket, tenant_rate).map_err(wait)?;
    let key_bucket = format!("key:{}", caller.key_hash);
    if let Err(seconds) = limiter.take(&key_bucket, u64::from(limits.key_requests_per_minute)) {
        limiter.give_back(&tenant_bucket, tenant_rate);
        return Err(wait(seconds));
    }
    Ok(())
}

/// A slot among the key's calls in flight, held until the call ends.
pub fn enter(
    slots: &crate::limits::InFlight,
    limits: &Limits,
    caller: &Caller,
) -> Result<InFlightSlot, Refusal> {
    slots
        .enter(&caller.key_hash, limits.key_max_in_flight)
        .ok_or(Refusal::TooManyInFlight {
            limit: limits.key_max_in_flight,
        })
}

/// Whether the call is recorded, given the lake's back-pressure: `Ok(false)` serves it
/// unrecorded (when so configured), a refusal asks the client to come back.
pub fn recording(
    record: bool,
    backlogged: bool,
    on_backpressure: OnBackpressure,
    metrics: &Metrics,
) -> Result<bool, Refusal> {
    if !record {
        return Ok(false);
    }
    if !backlogged {
        return Ok(true);
    }
    match on_backpressure {
        OnBackpressure::Refuse => {
            metrics
                .refused_backpressure
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(Refusal::RecordingUnavailable { what: "calls" })
        }
        OnBackpressure::ServeUnrecorded => {
            let served = metrics
                .unrecorded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if served.is_multiple_of(1000) {
                tracing::warn!(
                    unrecorded = served + 1,
                    "Lake back-log over budget: serving calls without recording them (x-atdp-recorded: false)."
                );
            }
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> AccessPolicy {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../policies/examples/quickstart");
        AccessPolicy::load(&dir).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn keys_come_as_bearer_or_x_api_key_and_must_be_known_and_active() {
        let access = access();
        let caller = authenticate(
            &access,
            &headers(&[("authorization", "Bearer sk-atdp-demo-agent")]),
        )
        .unwrap();
        assert_eq!(caller.identity.agent, "demo-agent");
        let caller =
            authenticate(&access, &headers(&[("x-api-key", "sk-atdp-demo-agent")])).unwrap();
        assert_eq!(caller.identity.tenant, "demo");
        assert_eq!(
            authenticate(&access, &headers(&[])).unwrap_err(),
            Refusal::MissingApiKey
        );
        assert_eq!(
            authenticate(
                &access,
                &headers(&[("authorization", "Basic sk-atdp-demo-agent")])
            )
            .unwrap_err(),
            Refusal::MissingApiKey
        );
        assert_eq!(
            authenticate(&access, &headers(&[("x-api-key", "sk-unknown")])).unwrap_err(),
            Refusal::InvalidApiKey
        );
    }

    #[test]
    fn back_pressure_refuses_or_serves_unrecorded() {
        let metrics = Metrics::default();
        assert_eq!(
            recording(true, false, OnBackpressure::Refuse, &metrics),
            Ok(true)
        );
        assert_eq!(
            recording(true, true, OnBackpressure::Refuse, &metrics),
            Err(Refusal::RecordingUnavailable { what: "calls" })
        );
        assert_eq!(
            recording(true, true, OnBackpressure::ServeUnrecorded, &metrics),
            Ok(false)
        );
        assert_eq!(
            recording(false, true, OnBackpressure::Refuse, &metrics),
            Ok(false)
        );
    }
}
