//! One trajectory as a reviewer reads it: its steps in tree order (a branch or retry is
//! shown under the step it continues), each step's new messages and reply, masked spans
//! marked by entity type, and rewards where they belong.

use std::collections::{BTreeMap, HashMap};

use atdp_schema::{Message, Reward, Step, Table};
use deltalake::datafusion::prelude::{col, lit};
use serde::Serialize;

use crate::access::{self, Auditor};
use crate::catalog::Catalog;
use crate::catalog::rows;
use crate::error::{Error, Result};

/// A piece of displayed text: plain, or a masked span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The text as stored (for a masked span: its token).
    pub text: String,
    /// For a masked span: its entity type.
    pub entity: Option<String>,
    /// Whether the span's original is in the vault (`tokenize`), so it can be revealed.
    pub revealable: bool,
}

/// A tool call, with its arguments split into segments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallView {
    /// The tool-call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The (masked) arguments.
    pub arguments: Vec<Segment>,
}

/// A message as displayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageView {
    /// `system`, `user`, `assistant`, `tool`, …
    pub role: String,
    /// The participant or tool name.
    pub name: Option<String>,
    /// For tool results: the call answered.
    pub tool_call_id: Option<String>,
    /// The (masked) content.
    pub content: Vec<Segment>,
    /// Tool calls requested.
    pub tool_calls: Vec<CallView>,
}

/// One step as displayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    /// The step as stored.
    pub step: Step,
    /// Depth in the tree (0 for a root).
    pub depth: usize,
    /// The messages this step added to its parent's conversation (all, for a root).
    pub messages: Vec<MessageView>,
    /// The model's reply.
    pub reply: Option<MessageView>,
    /// Rewards on this step.
    pub rewards: Vec<Reward>,
}

/// A trajectory as displayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrajectoryView {
    /// Its id.
    pub trajectory_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Steps in tree order.
    pub steps: Vec<StepView>,
    /// Rewards on the whole trajectory.
    pub rewards: Vec<Reward>,
    /// The table versions read.
    pub versions: BTreeMap<String, Option<u64>>,
}

/// The steps and rewards of trajectory `id` of `tenant` (or of the first of the auditor's
/// tenants that has it), if the auditor may read it. A trajectory of a tenant the auditor
/// may not read is "not found", as one that does not exist.
pub async fn load(
    catalog: &Catalog,
    policy: &atdp_policies::AccessPolicy,
    auditor: &Auditor,
    id: &str,
    tenant: Option<&str>,
) -> Result<(Vec<Step>, Vec<Reward>)> {
    let not_found = || Error::NotFound(format!("trajectory {id}"));
    let tenants = match tenant {
        Some(t) if auditor.sees(t) => vec![t.to_owned()],
        Some(_) => return Err(not_found()),
        None => auditor.tenants.clone(),
    };
    if tenants.is_empty() {
        return Err(not_found());
    }
    let in_tenants =
        col("tenant_id").in_list(tenants.iter().map(|t| lit(t.clone())).collect(), false);
    let filter = in_tenants.and(col("trajectory_id").eq(lit(id.to_owned())));
    let mut steps = rows(
        catalog.frame(Table::Steps).await?.filter(filter),
        atdp_schema::steps_from_batch,
    )
    .await?;
    let Some(owner) = steps.iter().map(|s| s.tenant_id.clone()).min() else {
        return Err(not_found());
    };
    steps.retain(|s| s.tenant_id == owner);
    let verdict = access::decide(
        policy,
        auditor,
        "read_trajectory",
        id,
        &owner,
        serde_json::json!({}),
    );
    if !verdict.allowed {
        return Err(Error::Denied(format!(
            "this auditor may not read trajectory {id}"
        )));
    }
    let mut rewards = rows(
        catalog.frame(Table::Rewards).await?.filter(
            col("tenant_id")
                .eq(lit(owner.clone()))
                .and(col("trajectory_id").eq(lit(id.to_owned()))),
        ),
        atdp_schema::rewards_from_batch,
    )
    .await?;
    rewards.sort_by_key(|r| r.created_at);
    Ok((steps, rewards))
}

/// Splits `text` at the masked tokens it holds.
pub fn segments(text: &str, spans: &[(String, String, bool)]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let next = spans
            .iter()
            .filter(|(token, _, _)| !token.is_empty())
            .filter_map(|span| rest.find(span.0.as_str()).map(|at| (at, span)))
            .min_by_key(|(at, span)| (*at, std::cmp::Reverse(span.0.len())));
        let Some((at, (token, entity, revealable))) = next else {
            break;
        };
        if at > 0 {
            out.push(plain(&rest[..at]));
        }
        out.push(Segment {
            text: token.clone(),
            entity: Some(entity.clone()),
            revealable: *revealable,
        });
        rest = &rest[at + token.len()..];
    }
    if !rest.is_empty() {
        out.push(plain(rest));
    }
    out
}

fn plain(text: &str) -> Segment {
    Segment {
        text: text.to_owned(),
        entity: None,
        revealable: false,
    }
}

fn message_view(message: &Message, spans: &[(String, String, bool)]) -> MessageView {
    MessageView {
        role: message.role.clone(),
        name: message.name.clone(),
        tool_call_id: message.tool_call_id.clone(),
        content: message
            .content
            .as_deref()
            .map(|c| segments(c, spans))
            .unwrap_or_default(),
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| CallView {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: segments(&call.arguments, spans),
            })
            .collect(),
    }
}

/// Builds the view: steps in tree order (children after their parent, siblings by start
/// time), each with the messages it added.
pub fn view(
    trajectory_id: &str,
    steps: Vec<Step>,
    rewards: Vec<Reward>,
    versions: BTreeMap<String, Option<u64>>,
) -> TrajectoryView {
    let tenant_id = steps
        .first()
        .map(|s| s.tenant_id.clone())
        .unwrap_or_default();
    let by_id: HashMap<&str, &Step> = steps.iter().map(|s| (s.step_id.as_str(), s)).collect();
    let mut children: BTreeMap<Option<&str>, Vec<&Step>> = BTreeMap::new();
    for step in &steps {
        // A parent missing from this trajectory (or from the lake) makes the step a root.
        let parent = step
            .parent_step_id
            .as_deref()
            .filter(|p| by_id.contains_key(p));
        children.entry(parent).or_default().push(step);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| (a.started_at, &a.step_id).cmp(&(b.started_at, &b.step_id)));
    }
    let mut ordered: Vec<(&Step, usize)> = Vec::new();
    let mut stack: Vec<(&Step, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|s| (*s, 0)).collect())
        .unwrap_or_default();
    while let Some((step, depth)) = stack.pop() {
        ordered.push((step, depth));
        if let Some(kids) = children.get(&Some(step.step_id.as_str())) {
            stack.extend(kids.iter().rev().map(|s| (*s, depth + 1)));
        }
    }
    let (step_rewards, trajectory_rewards): (Vec<Reward>, Vec<Reward>) =
        rewards.into_iter().partition(|r| r.step_id.is_some());
    let views = ordered
        .into_iter()
        .map(|(step, depth)| {
            let spans: Vec<(String, String, bool)> = step
                .pii
                .iter()
                .map(|p| (p.token.clone(), p.entity.clone(), p.action == "tokenize"))
                .collect();
            let seen = step
                .parent_step_id
                .as_deref()
                .and_then(|p| by_id.get(p))
                .map(|parent| parent.request_messages.len() + 1)
                .filter(|n| *n <= step.request_messages.len())
                .unwrap_or(0);
            StepView {
                messages: step.request_messages[seen..]
                    .iter()
                    .map(|m| message_view(m, &spans))
                    .collect(),
                reply: step
                    .response_message
                    .as_ref()
                    .map(|m| message_view(m, &spans)),
                rewards: step_rewards
                    .iter()
                    .filter(|r| r.step_id.as_deref() == Some(step.step_id.as_str()))
                    .cloned()
                    .collect(),
                depth,
                step: step.clone(),
            }
        })
        .collect();
    TrajectoryView {
        trajectory_id: trajectory_id.to_owned(),
        tenant_id,
        steps: views,
        rewards: trajectory_rewards,
        versions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_mark_tokens_and_keep_the_rest() {
        let spans = vec![
            (
                "<EMAIL_ADDRESS_0123456789ab>".to_owned(),
                "EMAIL_ADDRESS".to_owned(),
                true,
            ),
            ("[US_SSN]".to_owned(), "US_SSN".to_owned(), false),
        ];
        let got = segments("Mail <EMAIL_ADDRESS_0123456789ab>, SSN [US_SSN].", &spans);
        let texts: Vec<(&str, Option<&str>, bool)> = got
            .iter()
            .map(|s| (s.text.as_str(), s.entity.as_deref(), s.revealable))
            .collect();
        assert_eq!(
            texts,
            [
                ("Mail ", None, false),
                ("<EMAIL_ADDRESS_0123456789ab>", Some("EMAIL_ADDRESS"), true),
                (", SSN ", None, false),
                ("[US_SSN]", Some("US_SSN"), false),
                (".", None, false),
            ]
        );
        assert_eq!(segments("", &spans), []);
    }

    fn step(id: &str, parent: Option<&str>, at: i64, messages: usize) -> Step {
        Step {
            step_id: id.into(),
            trajectory_id: "t".into(),
            parent_step_id: parent.map(str::to_owned),
            tenant_id: "demo".into(),
            started_at: at,
            request_messages: (0..messages)
                .map(|i| Message {
                    role: "user".into(),
                    content: Some(format!("m{i}")),
                    ..Message::default()
                })
                .collect(),
            ..Step::default()
        }
    }

    #[test]
    fn tree_order_puts_branches_under_their_parent() {
        // a ─ b ─ d
        //   └ c        (c is a retry of b, started later than d)
        let steps = vec![
            step("d", Some("b"), 3, 5),
            step("a", None, 1, 1),
            step("c", Some("a"), 4, 3),
            step("b", Some("a"), 2, 3),
        ];
        let view = view("t", steps, Vec::new(), BTreeMap::new());
        let order: Vec<(&str, usize, usize)> = view
            .steps
            .iter()
            .map(|s| (s.step.step_id.as_str(), s.depth, s.messages.len()))
            .collect();
        // b and c add 3 - (1 + 1) = 1 message each; d adds 5 - (3 + 1) = 1.
        assert_eq!(order, [("a", 0, 1), ("b", 1, 1), ("d", 2, 1), ("c", 1, 1)]);
    }
}
