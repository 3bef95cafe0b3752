//! The context attributes a policy directory's schema declares for each action.
//!
//! The proxy gives every call decision the same context (the entity types found, the
//! upstream's trust, the size, the unscannable parts). A schema written before an attribute
//! existed does not declare it, and Cedar's request check refuses a context with an attribute
//! its schema lacks, which would deny every call. So a request's context carries only the
//! attributes the schema declares for its action. This changes no decision: the validator
//! refuses a policy that reads an attribute the schema does not declare, so no policy can read
//! one that was left out. An action whose context the schema does not state as a record (or
//! that this reader cannot resolve) gets the context as given, and Cedar's check decides.

use std::collections::{HashMap, HashSet};

use cedar_policy::SchemaFragment;
use serde_json::{Map, Value};

/// For each action (by id) whose context the schema declares as a record, the names of its
/// attributes.
pub(crate) fn declared(schema_source: &str) -> HashMap<String, HashSet<String>> {
    let Ok((fragment, _)) = SchemaFragment::from_cedarschema_str(schema_source) else {
        return HashMap::new();
    };
    let Ok(Value::Object(namespaces)) = fragment.to_json_value() else {
        return HashMap::new();
    };
    let mut declared = HashMap::new();
    for (namespace, body) in &namespaces {
        let Some(actions) = body.get("actions").and_then(Value::as_object) else {
            continue;
        };
        for (action, definition) in actions {
            let context = definition
                .get("appliesTo")
                .and_then(|a| a.get("context"))
                .and_then(Value::as_object);
            if let Some(attributes) = context.and_then(|c| record(c, namespace, &namespaces, 0)) {
                declared.insert(action.clone(), attributes.keys().cloned().collect());
            }
        }
    }
    declared
}

/// The attributes of the record type `ty`, following references to common types (at most a
/// few levels: a schema's common types cannot refer to each other in a cycle).
fn record<'a>(
    ty: &'a Map<String, Value>,
    namespace: &str,
    namespaces: &'a Map<String, Value>,
    depth: usize,
) -> Option<&'a Map<String, Value>> {
    if depth > 8 {
        return None;
    }
    let kind = ty.get("type").and_then(Value::as_str)?;
    let name = match kind {
        "Record" => return ty.get("attributes").and_then(Value::as_object),
        "EntityOrCommon" => ty.get("name").and_then(Value::as_str)?,
        other => other,
    };
    let (space, base) = match name.rsplit_once("::") {
        Some((space, base)) => (space, base),
        None => (namespace, name),
    };
    let common = namespaces
        .get(space)
        .and_then(|n| n.get("commonTypes"))
        .and_then(|c| c.get(base))
        .and_then(Value::as_object)?;
    record(common, space, namespaces, depth + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_of_inline_and_common_context_types_are_read() {
        let schema = r#"
            namespace Atdp {
              entity Key;
              entity Model;
              type CallContext = { "entities": Set<String>, "upstream_trust": String };
              action invoke_model appliesTo { principal: [Key], resource: [Model], context: CallContext };
              action reveal appliesTo { principal: [Key], resource: [Model], context: { "reason": String } };
              action erase appliesTo { principal: [Key], resource: [Model] };
            }
        "#;
        let declared = declared(schema);
        let names = |action: &str| {
            let mut names: Vec<&str> = declared[action].iter().map(String::as_str).collect();
            names.sort_unstable();
            names
        };
        assert_eq!(names("invoke_model"), ["entities", "upstream_trust"]);
        assert_eq!(names("reveal"), ["reason"]);
        assert!(declared.get("erase").is_none_or(HashSet::is_empty));
    }
}
