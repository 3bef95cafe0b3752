//! Place: the new step's id, its trajectory and the step it continues
//! ([`crate::grouping`]), and what else the record needs to know from the start.

use std::collections::BTreeMap;

use http::HeaderMap;

use crate::config::Upstream;
use crate::grouping::{Naming, Trajectories};
use crate::refusal::Refusal;
use crate::stages::admit::Caller;
use crate::stages::read::header_id;
use crate::stages::record::StepStart;
use crate::wire::{ApiKind, RequestView};

/// How the client names its trajectory.
#[derive(Debug, Clone)]
pub enum Named {
    /// `x-atdp-trajectory-id`.
    Trajectory(String),
    /// `x-atdp-session-id`.
    Session(String),
    /// Neither: grouped automatically.
    Automatic,
}

impl Named {
    /// From the request's headers (the trajectory id wins over the session).
    pub fn from_headers(headers: &HeaderMap) -> Result<Named, Refusal> {
        let trajectory = header_id(headers, "x-atdp-trajectory-id")?;
        let session = header_id(headers, "x-atdp-session-id")?;
        Ok(match (trajectory, session) {
            (Some(id), _) => Named::Trajectory(id),
            (None, Some(key)) => Named::Session(key),
            (None, None) => Named::Automatic,
        })
    }

    /// As grouping takes it.
    pub fn borrow(&self) -> Naming<'_> {
        match self {
            Named::Trajectory(id) => Naming::Trajectory(id),
            Named::Session(key) => Naming::Session(key),
            Named::Automatic => Naming::Automatic,
        }
    }
}

/// The start of the step for a call of `caller` going to `upstream`.
pub fn place(
    trajectories: &Trajectories,
    caller: &Caller,
    named: &Named,
    api: ApiKind,
    upstream: &Upstream,
    request: &RequestView,
    started_at: i64,
) -> StepStart {
    let tenant = &caller.identity.tenant;
    let placement = trajectories.place(tenant, named.borrow(), &request.messages);
    let mut tags = BTreeMap::new();
    if let Named::Session(key) = named {
        tags.insert("session".to_owned(), key.clone());
    }
    StepStart {
        step_id: uuid::Uuid::now_v7().to_string(),
        trajectory_id: placement.trajectory_id,
        parent_step_id: placement.parent_step_id,
        turn_index: placement.turn_index,
        tenant_id: tenant.clone(),
        agent_id: caller.identity.agent.clone(),
        started_at,
        api: api.name(),
        upstream: upstream.name.clone(),
        upstream_trust: upstream.trust,
        consent: None,
        model_requested: request.model.clone(),
        tags,
        sent_masked: Default::default(),
    }
}
