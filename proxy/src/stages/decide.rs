//! Decide: whether the call may go out as it is.
//!
//! First the gates that need no policy evaluation: towards an `external` upstream, a
//! top-level field outside the API's known list ([`crate::wire::known_fields`]), a content
//! block, part or item of a type outside the known ones, and a beta feature value outside the
//! known ones are refused unless `forwarding.toml` allows them by name; `background: true` (Responses) is refused everywhere, since its reply would be
//! fetched later around the proxy, unrecorded; and a name or id that holds a value the
//! detectors find is refused ([`check_names`]). Then Cedar: `invoke_model` on the dispatched
//! model and on every model the provider may fall back to, and `call_tool` on every offer
//! (tools of every form, wherever the request defines them, MCP servers, skills, saved prompts:
//! [`crate::wire::Offer`]), each with the request's context (entity types found, the
//! upstream's trust, the size, the parts no detector can read). One denial denies the call; an
//! evaluation error is a denial.

use atdp_detect::Scanner;

use atdp_policies::{
    AccessPolicy, Action, Destination, Forwarding, FoundValues, KnownValues, MaskPolicy, Policy,
    Verdict, decode_json_escapes,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::config::Trust;
use crate::refusal::Refusal;
use crate::stages::admit::Caller;
use crate::stages::place::Named;
use crate::wire::{ANTHROPIC_BETAS, ApiKind, OPENAI_BETAS, RequestView};

/// The beta headers and the values each API's SDK knows.
const BETA_HEADERS: [(&str, &[&str]); 2] = [
    ("anthropic-beta", ANTHROPIC_BETAS),
    ("openai-beta", OPENAI_BETAS),
];

/// Refuses a request whose names or ids hold a value the detectors find and that the policy
/// masks for storage or for this upstream (`masked`: the masking policies of both): the model
/// and the fallback models, the entities of its offers (tool names, MCP server URLs, skill and
/// prompt ids), the media types of its unscannable parts, the trajectory or session header,
/// and the client headers that are forwarded. They are routed on, decided on, forwarded and
/// stored as given (names are not text to mask: a masked model name reaches no model), so none
/// may carry what the policy keeps from the lake or the provider. Each is read as it stands
/// and with its JSON escapes decoded ([`scan_as_read`]). The refusal names the field and the
/// entity type, never the value.
pub fn check_names(
    scanner: &Scanner,
    masked: [&MaskPolicy; 2],
    request: &RequestView,
    named: &Named,
    forwarded: &[(HeaderName, HeaderValue)],
) -> Result<(), Refusal> {
    let kept = |entity: &str| masked.iter().any(|p| p.action(entity) != Action::Allow);
    each_name(
        request,
        named,
        forwarded,
        |field, text| match scan_as_read(scanner, text, &kept).first() {
            Some(span) => Err(holds_a_value(field, span.entity)),
            None => Ok(()),
        },
    )
}

/// The values that masking found in a request's text with the words around them (`found`:
/// [`crate::stages::mask::Outbound`]'s `by_context`, a phone number after "mobile:"), of a type
/// `policy` masks for storage or for an upstream of `trust`, to match its names against
/// ([`check_names_against`]). A shaped value is matched glued to other text as well
/// (`user4155550172`: ids are written so). Built on the heavy-work pool for a large body: a
/// body can hold many such values. A failure to build it refuses the call.
pub fn context_matcher(
    policy: &Policy,
    trust: Trust,
    found: &FoundValues,
) -> Result<KnownValues, Refusal> {
    let masked = [
        policy.masking.policy(Destination::Storage),
        policy
            .masking
            .policy(crate::stages::mask::destination(trust)),
    ];
    let kept = |entity: &str| masked.iter().any(|p| p.action(entity) != Action::Allow);
    let values = found
        .iter()
        .filter(|(_, entity)| kept(entity))
        .map(|(value, entity)| (value, entity, KnownValues::gluable(value, entity)));
    KnownValues::with_glued(values).map_err(|error| {
        tracing::error!(error = %error, "The values found by their context cannot be matched; the request is refused.");
        Refusal::MaskingFailed
    })
}

/// Refuses a request whose names or ids (those of [`check_names`]) repeat a value of `known`
/// ([`context_matcher`]): read alone, such a name shows nothing, and it would be routed,
/// forwarded and stored as given. A value is matched as masking matches a known value (in any
/// spelling). Names, places and organisations are not among them (a name that is also a
/// word, `Claude`, would refuse every model named after it).
pub fn check_names_against(
    known: &KnownValues,
    request: &RequestView,
    named: &Named,
    forwarded: &[(HeaderName, HeaderValue)],
) -> Result<(), Refusal> {
    if known.is_empty() {
        return Ok(());
    }
    each_name(request, named, forwarded, |field, text| {
        let decoded = text.contains('\\').then(|| decode_json_escapes(text));
        for read in std::iter::once(text).chain(decoded.as_deref()) {
            let holds = known.first_in(read).map_err(|error| {
                tracing::error!(error = %error, "Matching a name against the request's values failed; the request is refused.");
                Refusal::MaskingFailed
            })?;
            if let Some(entity) = holds {
                return Err(holds_a_value(field, entity));
            }
        }
        Ok(())
    })
}

/// The refusal of a name or id at `field` that holds a value of `entity`.
fn holds_a_value(field: &str, entity: &str) -> Refusal {
    Refusal::InvalidRequest {
        message: format!(
            "{field} holds a value the detectors find ({entity}); names, ids and headers are \
             forwarded and stored as given, so they may not carry personal data"
        ),
    }
}

/// Calls `check` with each name or id of the request that is routed on, decided on,
/// forwarded or stored as given, and the field it is in; stops at its first refusal.
fn each_name(
    request: &RequestView,
    named: &Named,
    forwarded: &[(HeaderName, HeaderValue)],
    mut check: impl FnMut(&str, &str) -> Result<(), Refusal>,
) -> Result<(), Refusal> {
    check("model", &request.model)?;
    for model in &request.extra_models {
        check("a fallback model", model)?;
    }
    for offer in &request.offers {
        check(&offer.field, &offer.entity)?;
    }
    for media in &request.unscannable {
        check("a media type", media)?;
    }
    match named {
        Named::Trajectory(id) => check("header x-atdp-trajectory-id", id)?,
        Named::Session(id) => check("header x-atdp-session-id", id)?,
        Named::Automatic => {}
    }
    for (name, value) in forwarded {
        let text = String::from_utf8_lossy(value.as_bytes());
        check(&format!("header {name}"), &text)?;
    }
    Ok(())
}

/// What the detectors find of the types `kept` names in a name or id that is stored and
/// forwarded as given: in the text as it stands and, when it has JSON escapes, as a reader
/// that decodes them sees it (`jane\u0040example.com`; the scanner decodes percent and HTML
/// escapes itself). The text is read as if the other types were not looked for, so that a
/// value of a kept type is found even where one of an allowed type covers it. The spans are
/// for their entity types only (those of the decoded text lie elsewhere).
pub fn scan_as_read(
    scanner: &Scanner,
    text: &str,
    kept: &dyn Fn(&str) -> bool,
) -> Vec<atdp_detect::Span> {
    let skip = |entity: &str| !kept(entity);
    let mut spans = scanner.scan_without(text, &skip);
    if text.contains('\\') {
        spans.extend(scanner.scan_without(&decode_json_escapes(text), &skip));
    }
    spans
}

/// Refuses what the proxy cannot judge towards an external upstream (a top-level field or a
/// content type outside the API's known lists, unless `forwarding.toml` allows it), and what it
/// cannot record towards any.
pub fn check_request(
    api: ApiKind,
    document: &Value,
    request: &RequestView,
    trust: Trust,
    forwarding: &Forwarding,
) -> Result<(), Refusal> {
    if api == ApiKind::OpenAiResponses && document.get("background") == Some(&Value::Bool(true)) {
        return Err(Refusal::Unrecordable {
            field: "background: true",
        });
    }
    if trust != Trust::External {
        return Ok(());
    }
    if let Some(field) = request
        .unknown_fields
        .iter()
        .find(|field| !forwarding.allows_field(api.name(), field))
    {
        return Err(Refusal::UnknownField {
            api: api.name(),
            field: field.clone(),
        });
    }
    if let Some(unknown) = request
        .unknown_content
        .iter()
        .find(|content| !forwarding.allows_content(api.name(), &content.kind))
    {
        // The type is client text: quoted only when it is a plain name.
        let plain = !unknown.kind.is_empty()
            && unknown.kind.len() <= 64
            && unknown
                .kind
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        return Err(Refusal::UnknownContent {
            api: api.name(),
            field: unknown.field.clone(),
            kind: plain.then(|| unknown.kind.clone()),
        });
    }
    Ok(())
}

/// Refuses a beta feature value neither the SDKs nor `forwarding.toml` know, towards an
/// external upstream. A header may carry several values, comma-separated, on several lines.
pub fn check_betas(
    headers: &HeaderMap,
    trust: Trust,
    forwarding: &Forwarding,
) -> Result<(), Refusal> {
    if trust != Trust::External {
        return Ok(());
    }
    for (header, known) in BETA_HEADERS {
        for value in headers.get_all(header) {
            let Ok(text) = value.to_str() else {
                return Err(Refusal::InvalidHeader {
                    name: header,
                    rule: "visible ASCII",
                });
            };
            for beta in text.split(',').map(str::trim).filter(|b| !b.is_empty()) {
                if !known.contains(&beta) && !forwarding.allows_beta(beta) {
                    return Err(Refusal::UnknownBeta {
                        header,
                        value: beta.to_owned(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Cedar's decisions on one call.
#[derive(Debug, Clone)]
pub struct Decision {
    /// What was decided (`model gpt-4o`, `tool lookup`) and the verdict, in order.
    pub verdicts: Vec<(String, Verdict)>,
}

impl Decision {
    /// Why the call is denied: the first denial, in words; `None` when allowed.
    pub fn denial(&self) -> Option<String> {
        let (what, verdict) = self.verdicts.iter().find(|(_, v)| !v.allowed)?;
        Some(if !verdict.errors.is_empty() {
            format!("{what} is not allowed: the policy could not be evaluated for this request")
        } else if verdict.policies.is_empty() {
            format!("{what} is not allowed: no policy permits it for this key")
        } else {
            format!(
                "{what} is not allowed: denied by policy {}",
                verdict.policies.join(", ")
            )
        })
    }

    /// The policies that decided: those of the denial when denied, else of every permit.
    pub fn policies(&self) -> Vec<String> {
        match self.verdicts.iter().find(|(_, v)| !v.allowed) {
            Some((_, verdict)) => verdict.policies.clone(),
            None => self
                .verdicts
                .iter()
                .flat_map(|(_, v)| v.policies.iter().cloned())
                .collect(),
        }
    }
}

/// What Cedar is asked about, besides the offers.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The model sent upstream (after aliasing).
    pub model: &'a str,
    /// Entity types found in the request.
    pub entities: &'a [String],
    /// The upstream's trust.
    pub trust: Trust,
    /// The body's size in bytes.
    pub request_bytes: usize,
}

/// Decides the model, every fallback model and every offer.
pub fn decide(
    access: &AccessPolicy,
    caller: &Caller,
    request: &RequestView,
    facts: CallFacts<'_>,
) -> Decision {
    let context = json!({
        "entities": facts.entities,
        "upstream_trust": facts.trust.name(),
        "request_bytes": i64::try_from(facts.request_bytes).unwrap_or(i64::MAX),
        "unscannable": request.unscannable,
    });
    let principal = ("ApiKey", caller.key_hash.as_str());
    let models =
        std::iter::once(facts.model).chain(request.extra_models.iter().map(String::as_str));
    let mut verdicts: Vec<(String, Verdict)> = models
        .map(|model| {
            (
                format!("model {model}"),
                access.decide(principal, "invoke_model", ("Model", model), context.clone()),
            )
        })
        .collect();
    for offer in &request.offers {
        verdicts.push((
            format!("tool {} ({})", offer.entity, offer.field),
            access.decide(
                principal,
                "call_tool",
                ("Tool", &offer.entity),
                context.clone(),
            ),
        ));
    }
    Decision { verdicts }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_request;

    use crate::stages::test_headers as headers;

    #[test]
    fn unknown_fields_are_refused_towards_external_upstreams_unless_allowed() {
        let body = json!({"model": "m", "messages": [], "x_exfiltrate": "jane@example.com"});
        let view = parse_request(ApiKind::OpenAiChat, &body).unwrap();
        let none = Forwarding::default();
        let refusal =
            check_request(ApiKind::OpenAiChat, &body, &view, Trust::External, &none).unwrap_err();
        assert_eq!(refusal.code(), "unknown_field");
        assert!(refusal.message().contains("x_exfiltrate"));
        assert!(check_request(ApiKind::OpenAiChat, &body, &view, Trust::Internal, &none).is_ok());
        let allowed =
            Forwarding::from_toml("fields = { \"openai.chat\" = [\"x_exfiltrate\"] }").unwrap();
        assert!(
            check_request(ApiKind::OpenAiChat, &body, &view, Trust::External, &allowed).is_ok()
        );
    }

    #[test]
    fn a_background_response_is_refused_everywhere() {
        let body = json!({"model": "m", "input": "hi", "background": true});
        let view = parse_request(ApiKind::OpenAiResponses, &body).unwrap();
        for trust in [Trust::External, Trust::Internal] {
            let refusal = check_request(
                ApiKind::OpenAiResponses,
                &body,
                &view,
                trust,
                &Forwarding::default(),
            )
            .unwrap_err();
            assert_eq!(refusal.code(), "unrecordable_option");
        }
    }

    /// A name that holds a masked value inside one of a type the policy allows (a card
    /// written as an allowed order reference) is read for the masked type.
    #[test]
    fn a_masked_value_under_an_allowed_one_is_found_in_a_name() {
        use atdp_detect::{CustomEntity, CustomMatch, DetectionConfig};
        let config = DetectionConfig {
            custom: vec![CustomEntity {
                name: "ORDER_ID".into(),
                matcher: CustomMatch::Pattern(r"ref [0-9 ]{8,40}[0-9]".into()),
                score: 1.0,
                context: Default::default(),
            }],
            ..Default::default()
        };
        let scanner = Scanner::with_config(&config, None).unwrap();
        let kept = |entity: &str| entity != "ORDER_ID";
        let found = |text: &str| -> Vec<&str> {
            scan_as_read(&scanner, text, &kept)
                .iter()
                .map(|span| span.entity)
                .collect()
        };
        assert_eq!(found("ref 4111 1111 1111 1111"), ["CREDIT_CARD"]);
        assert_eq!(found("ref 4111 1111 1111 \\u0031111"), ["CREDIT_CARD"]);
        assert!(found("ref 20240117").is_empty());
    }

    #[test]
    fn unknown_beta_values_are_refused_towards_external_upstreams() {
        let none = Forwarding::default();
        let known = headers(&[(
            "anthropic-beta",
            "mcp-client-2025-04-04, computer-use-2025-01-24",
        )]);
        assert!(check_betas(&known, Trust::External, &none).is_ok());
        let sneaky = headers(&[
            ("anthropic-beta", "mcp-client-2025-04-04"),
            ("anthropic-beta", "secret-tools-2027-01-01"),
        ]);
        let refusal = check_betas(&sneaky, Trust::External, &none).unwrap_err();
        assert_eq!(refusal.code(), "unknown_beta");
        assert!(check_betas(&sneaky, Trust::Internal, &none).is_ok());
        let allowed = Forwarding::from_toml("betas = [\"secret-tools-2027-01-01\"]").unwrap();
        assert!(check_betas(&sneaky, Trust::External, &allowed).is_ok());
        let openai = headers(&[("openai-beta", "assistants=v2")]);
        assert!(check_betas(&openai, Trust::External, &none).is_err());
    }
}
