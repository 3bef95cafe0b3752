//! `training.toml`: which recorded steps may be trained on, under what legal basis, and for
//! how long. The proxy marks every step it records with the decision (the `steps` columns
//! `training_eligible`, `legal_basis`, `retention_until`, `consent_source` of ATDP 1.1);
//! training readers never select a step marked ineligible or past its retention.
//!
//! Rules are tried in order, the first whose conditions all hold decides; a rule's condition
//! lists match when any of their values does, an absent list matches anything. Without a
//! matching rule, `[default]` decides (eligible, no legal basis, kept indefinitely, when the
//! file does not say otherwise). The caller's per-call consent (`x-atdp-consent`, sent by the
//! agent for its end user) can only narrow: `withdrawn` makes the step ineligible, `granted`
//! never makes a step the policy excludes eligible.
//!
//! ```toml
//! [default]
//! eligible = true
//! legal_basis = "legitimate_interests"
//! retention_days = 365
//!
//! [[rule]]
//! name = "globex-contract"       # recorded as consent_source "policy:globex-contract"
//! tenants = ["globex"]
//! agents = ["support-bot"]
//! upstreams = ["openai"]
//! upstream_trust = ["external"]
//! entities = ["US_SSN", "MEDICAL_LICENSE"]   # any of these entity types found in the step
//! eligible = false
//! legal_basis = "contract"
//! retention_days = 30
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The file's name inside a policy directory.
pub const TRAINING_FILE: &str = "training.toml";

/// The header an agent sends with a call to state its end user's consent to training.
pub const CONSENT_HEADER: &str = "x-atdp-consent";

/// `consent_source` of a step decided by the caller's [`CONSENT_HEADER`].
pub const HEADER_SOURCE: &str = "header";

/// `consent_source` of a step no rule matched.
pub const DEFAULT_SOURCE: &str = "policy:default";

/// Longest retention a rule may give (100 years).
const MAX_RETENTION_DAYS: u32 = 36_500;

/// Longest rule name.
const MAX_RULE_NAME: usize = 64;

/// The upstream trust levels a rule may name.
const TRUST_LEVELS: [&str; 2] = ["internal", "external"];

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraining {
    /// What applies when no rule matches.
    #[serde(default)]
    default: Option<RawDecision>,
    /// Rules, first match wins.
    #[serde(default, rename = "rule")]
    rules: Vec<RawRule>,
}

/// `[default]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDecision {
    /// Whether steps may be trained on (default true).
    eligible: Option<bool>,
    /// The legal basis the steps are kept and used under (`consent`, `contract`, …).
    legal_basis: Option<String>,
    /// Days after the call the step may be kept and trained on (default: no deadline).
    retention_days: Option<u32>,
}

/// One `[[rule]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    /// Name, recorded as `policy:<name>` in each step it decides.
    name: String,
    /// Tenants it applies to (any of; absent: all).
    tenants: Option<Vec<String>>,
    /// Agents it applies to (any of; absent: all).
    agents: Option<Vec<String>>,
    /// Upstream names it applies to (any of; absent: all).
    upstreams: Option<Vec<String>>,
    /// Upstream trust levels it applies to, `internal` or `external` (absent: both).
    upstream_trust: Option<Vec<String>>,
    /// Entity types of which at least one must have been found in the step (absent: any step).
    entities: Option<Vec<String>>,
    /// Whether the steps it matches may be trained on.
    eligible: bool,
    /// The legal basis the steps are kept and used under.
    legal_basis: Option<String>,
    /// Days after the call the step may be kept and trained on (absent: no deadline).
    retention_days: Option<u32>,
}

/// What a rule, or the default, decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the step may be trained on.
    pub eligible: bool,
    /// The legal basis.
    pub legal_basis: Option<String>,
    /// Days after the call the step may be kept and trained on.
    pub retention_days: Option<u32>,
}

impl Default for Decision {
    fn default() -> Self {
        Decision {
            eligible: true,
            legal_basis: None,
            retention_days: None,
        }
    }
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingRule {
    /// Its name.
    pub name: String,
    /// Tenants (empty: all).
    pub tenants: Vec<String>,
    /// Agents (empty: all).
    pub agents: Vec<String>,
    /// Upstream names (empty: all).
    pub upstreams: Vec<String>,
    /// Upstream trust levels (empty: both).
    pub upstream_trust: Vec<String>,
    /// Entity types, any of which found makes it match (empty: any step).
    pub entities: Vec<String>,
    /// What it decides.
    pub decision: Decision,
}

/// Validated `training.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Training {
    /// What applies when no rule matches.
    pub default: Decision,
    /// Rules, first match wins.
    pub rules: Vec<TrainingRule>,
}

/// The end user's consent to training, as the agent states it in [`CONSENT_HEADER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consent {
    /// `granted`: the step may be trained on if the policy allows it.
    Granted,
    /// `withdrawn`: the step is never trained on.
    Withdrawn,
}

impl Consent {
    /// From the header's value (`granted` or `withdrawn`, any case).
    pub fn from_header(value: &str) -> Option<Consent> {
        match value.trim().to_ascii_lowercase().as_str() {
            "granted" => Some(Consent::Granted),
            "withdrawn" => Some(Consent::Withdrawn),
            _ => None,
        }
    }
}

/// What is known of a recorded step that rules match on.
#[derive(Debug, Clone, Copy)]
pub struct StepFacts<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// Agent.
    pub agent: &'a str,
    /// Upstream name.
    pub upstream: &'a str,
    /// Upstream trust: `internal` or `external`.
    pub upstream_trust: &'a str,
    /// Entity types found in the step (request and reply).
    pub entities: &'a [&'a str],
}

/// The marks a step is recorded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    /// `training_eligible`.
    pub eligible: bool,
    /// `legal_basis`.
    pub legal_basis: Option<String>,
    /// Days after the call until `retention_until`.
    pub retention_days: Option<u32>,
    /// `consent_source`: `policy:<rule>`, [`DEFAULT_SOURCE`] or [`HEADER_SOURCE`].
    pub consent_source: String,
}

fn any_of(values: &[String], value: &str) -> bool {
    values.is_empty() || values.iter().any(|v| v == value)
}

impl TrainingRule {
    /// Whether every condition of the rule holds for `facts`.
    pub fn matches(&self, facts: &StepFacts<'_>) -> bool {
        any_of(&self.tenants, facts.tenant)
            && any_of(&self.agents, facts.agent)
            && any_of(&self.upstreams, facts.upstream)
            && any_of(&self.upstream_trust, facts.upstream_trust)
            && (self.entities.is_empty()
                || facts
                    .entities
                    .iter()
                    .any(|found| self.entities.iter().any(|e| e == found)))
    }
}

impl Training {
    /// The marks of a step: the first matching rule's decision (else the default), narrowed
    /// by the caller's `consent`. A policy's "no" stands whatever the header says, and stays
    /// attributed to the policy; otherwise a header decides (`withdrawn`: not eligible).
    pub fn mark(&self, facts: &StepFacts<'_>, consent: Option<Consent>) -> Marks {
        let (decision, source) = match self.rules.iter().find(|rule| rule.matches(facts)) {
            Some(rule) => (&rule.decision, format!("policy:{}", rule.name)),
            None => (&self.default, DEFAULT_SOURCE.to_owned()),
        };
        let (eligible, consent_source) = match (decision.eligible, consent) {
            (false, _) | (true, None) => (decision.eligible, source),
            (true, Some(consent)) => (consent == Consent::Granted, HEADER_SOURCE.to_owned()),
        };
        Marks {
            eligible,
            legal_basis: decision.legal_basis.clone(),
            retention_days: decision.retention_days,
            consent_source,
        }
    }

    /// Loads `training.toml` from `dir`; absent is the default (every step eligible, no
    /// deadline).
    pub fn load(dir: &Path) -> Result<Training> {
        let path = dir.join(TRAINING_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Training::from_toml(&text).map_err(|problems| {
                Error::Policy(format!("{TRAINING_FILE}: {}", problems.join("; ")))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Training::default()),
            Err(e) => Err(Error::Policy(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Entity types the rules name that the detectors do not report (`known`: the built-in
    /// and custom entity types of `masking.toml`), one problem each. A misspelt type would
    /// never match, and its rule would leave eligible what it was written to exclude.
    pub fn unknown_entities(&self, known: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            for entity in rule
                .entities
                .iter()
                .filter(|e| !known.contains(&e.as_str()))
            {
                problems.push(format!(
                    "rule {} ({:?}): entity type {entity} is not one the detectors report (built-in or a custom type of masking.toml)",
                    index + 1,
                    rule.name
                ));
            }
        }
        problems
    }

    /// Parses and checks the file's text; every problem is returned.
    pub fn from_toml(text: &str) -> std::result::Result<Training, Vec<String>> {
        let raw: RawTraining = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut problems = Vec::new();
        let default = match raw.default {
            Some(raw) => {
                check_decision(
                    &mut problems,
                    "default",
                    &raw.legal_basis,
                    raw.retention_days,
                );
                Decision {
                    eligible: raw.eligible.unwrap_or(true),
                    legal_basis: raw.legal_basis,
                    retention_days: raw.retention_days,
                }
            }
            None => Decision::default(),
        };
        let mut rules: Vec<TrainingRule> = Vec::new();
        for (i, raw) in raw.rules.into_iter().enumerate() {
            let at = format!("rule {} ({:?})", i + 1, raw.name);
            let valid_name = !raw.name.is_empty()
                && raw.name.len() <= MAX_RULE_NAME
                && raw
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !valid_name {
                problems.push(format!(
                    "{at}: a name is 1 to {MAX_RULE_NAME} letters, digits, '-', '_' or '.'"
                ));
            } else if rules.iter().any(|r| r.name == raw.name) {
                problems.push(format!("{at}: another rule has this name"));
            }
            check_decision(&mut problems, &at, &raw.legal_basis, raw.retention_days);
            let mut list = |field: &str, values: Option<Vec<String>>| {
                let values = values.unwrap_or_default();
                if values.iter().any(|v| v.trim().is_empty()) {
                    problems.push(format!("{at}: {field} has an empty value"));
                }
                values
            };
            let tenants = list("tenants", raw.tenants);
            let agents = list("agents", raw.agents);
            let upstreams = list("upstreams", raw.upstreams);
            let upstream_trust = list("upstream_trust", raw.upstream_trust);
            let entities = list("entities", raw.entities);
            for trust in &upstream_trust {
                if !TRUST_LEVELS.contains(&trust.as_str()) {
                    problems.push(format!(
                        "{at}: upstream_trust {trust:?} is not internal or external"
                    ));
                }
            }
            for entity in entities.iter().filter(|e| !e.trim().is_empty()) {
                let valid = entity.starts_with(|c: char| c.is_ascii_uppercase())
                    && entity
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                if !valid {
                    problems.push(format!(
                        "{at}: entity type {entity:?} is not an entity type name (upper case, digits, '_')"
                    ));
                }
            }
            rules.push(TrainingRule {
                name: raw.name,
                tenants,
                agents,
                upstreams,
                upstream_trust,
                entities,
                decision: Decision {
                    eligible: raw.eligible,
                    legal_basis: raw.legal_basis,
                    retention_days: raw.retention_days,
                },
            });
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Training { default, rules })
    }
}

fn check_decision(
    problems: &mut Vec<String>,
    at: &str,
    legal_basis: &Option<String>,
    retention_days: Option<u32>,
) {
    if legal_basis
        .as_deref()
        .is_some_and(|basis| basis.trim().is_empty() || basis.len() > 200)
    {
        problems.push(format!("{at}: legal_basis must be 1 to 200 characters"));
    }
    if retention_days.is_some_and(|days| days == 0 || days > MAX_RETENTION_DAYS) {
        problems.push(format!(
            "{at}: retention_days must be 1 to {MAX_RETENTION_DAYS}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[default]
legal_basis = "legitimate_interests"
retention_days = 365

[[rule]]
name = "health-data"
entities = ["MEDICAL_LICENSE", "US_SSN"]
eligible = false
legal_basis = "consent"

[[rule]]
name = "globex-contract"
tenants = ["globex"]
upstream_trust = ["external"]
eligible = false
legal_basis = "contract"
retention_days = 30

[[rule]]
name = "acme-support"
tenants = ["acme"]
agents = ["support-bot"]
upstreams = ["openai"]
eligible = true
retention_days = 90
"#;

    fn facts<'a>(tenant: &'a str, agent: &'a str, entities: &'a [&'a str]) -> StepFacts<'a> {
        StepFacts {
            tenant,
            agent,
            upstream: "openai",
            upstream_trust: "external",
            entities,
        }
    }

    #[test]
    fn the_first_matching_rule_decides_else_the_default() {
        let training = Training::from_toml(FILE).unwrap();
        let marks = training.mark(&facts("acme", "support-bot", &[]), None);
        assert_eq!(
            marks,
            Marks {
                eligible: true,
                legal_basis: None,
                retention_days: Some(90),
                consent_source: "policy:acme-support".into(),
            }
        );
        // An entity type found in the step: the earlier rule wins.
        let marks = training.mark(
            &facts("acme", "support-bot", &["EMAIL_ADDRESS", "US_SSN"]),
            None,
        );
        assert_eq!(
            (
                marks.eligible,
                marks.consent_source.as_str(),
                marks.legal_basis.as_deref()
            ),
            (false, "policy:health-data", Some("consent"))
        );
        let marks = training.mark(&facts("globex", "any", &[]), None);
        assert_eq!(
            (
                marks.eligible,
                marks.consent_source.as_str(),
                marks.retention_days
            ),
            (false, "policy:globex-contract", Some(30))
        );
        // Another agent of acme: no rule, the default.
        let marks = training.mark(&facts("acme", "other", &[]), None);
        assert_eq!(
            marks,
            Marks {
                eligible: true,
                legal_basis: Some("legitimate_interests".into()),
                retention_days: Some(365),
                consent_source: DEFAULT_SOURCE.into(),
            }
        );
        // An internal upstream does not match the globex rule.
        let internal = StepFacts {
            upstream_trust: "internal",
            ..facts("globex", "any", &[])
        };
        assert_eq!(
            training.mark(&internal, None).consent_source,
            DEFAULT_SOURCE
        );
    }

    #[test]
    fn consent_only_narrows() {
        let training = Training::from_toml(FILE).unwrap();
        let yes = facts("acme", "support-bot", &[]);
        let no = facts("globex", "any", &[]);
        let withdrawn = training.mark(&yes, Some(Consent::Withdrawn));
        assert_eq!(
            (withdrawn.eligible, withdrawn.consent_source.as_str()),
            (false, HEADER_SOURCE)
        );
        let granted = training.mark(&yes, Some(Consent::Granted));
        assert_eq!(
            (granted.eligible, granted.consent_source.as_str()),
            (true, HEADER_SOURCE)
        );
        for consent in [Some(Consent::Granted), Some(Consent::Withdrawn), None] {
            let marks = training.mark(&no, consent);
            assert_eq!(
                (marks.eligible, marks.consent_source.as_str()),
                (false, "policy:globex-contract"),
                "{consent:?}"
            );
        }
        assert_eq!(Consent::from_header(" Granted "), Some(Consent::Granted));
        assert_eq!(Consent::from_header("withdrawn"), Some(Consent::Withdrawn));
        assert_eq!(Consent::from_header("yes"), None);
    }

    #[test]
    fn no_file_leaves_every_step_eligible() {
        let training = Training::default();
        assert_eq!(
            training.mark(&facts("acme", "a", &["US_SSN"]), None),
            Marks {
                eligible: true,
                legal_basis: None,
                retention_days: None,
                consent_source: DEFAULT_SOURCE.into(),
            }
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Training::load(dir.path()).unwrap(), Training::default());
    }

    #[test]
    fn problems_are_all_reported() {
        let problems = Training::from_toml(
            r#"
[default]
retention_days = 0

[[rule]]
name = "a b"
upstream_trust = ["partner"]
entities = ["ssn", ""]
eligible = true
legal_basis = " "

[[rule]]
name = "x"
eligible = false
[[rule]]
name = "x"
eligible = false
retention_days = 40000
"#,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 8, "{problems:#?}");
        assert!(
            problems[0].starts_with("default: retention_days"),
            "{problems:?}"
        );
        assert!(Training::from_toml("[[rule]]\nname = \"n\"\n").is_err());
        assert!(Training::from_toml("colour = 1").is_err());
    }

    #[test]
    fn a_misspelt_entity_type_stops_the_policy_from_loading() {
        let text = r#"
[[rule]]
name = "no-ssn"
entities = ["US_SNN", "EMPLOYEE_ID"]
eligible = false
"#;
        let training = Training::from_toml(text).unwrap();
        let masking = crate::MaskingConfig::default();
        let known = masking.entity_types();
        let problems = training.unknown_entities(&known);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("US_SNN"), "{problems:?}");
        // A custom type of masking.toml is known.
        let mut known = known;
        known.push("EMPLOYEE_ID");
        assert_eq!(training.unknown_entities(&known).len(), 1);
        // The whole directory is refused, so the proxy keeps the policy it has (or does
        // not start) rather than recording SSN steps as eligible.
        let dir = tempfile::tempdir().unwrap();
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
        for entry in std::fs::read_dir(&example).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
            }
        }
        std::fs::write(dir.path().join(TRAINING_FILE), text).unwrap();
        let error = crate::Policy::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("US_SNN"), "{error}");
        assert!(
            crate::check_dir(dir.path())
                .iter()
                .any(|p| p.contains("US_SNN"))
        );
    }
}
