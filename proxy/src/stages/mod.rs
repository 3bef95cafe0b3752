//! The request path, as named stages. Each guarantee has one home:
//!
//! | stage | module | guarantees |
//! |---|---|---|
//! | admit | [`admit`] | a known, active key; rate and concurrency limits; back-pressure from the lake |
//! | read | [`read`] | JSON only, no encoding, no query string, bounded body read in bounded time; one reading of the body (a repeated key is refused) |
//! | route | [`route`] | the model maps to one configured upstream |
//! | decide | [`decide`] | unknown fields and betas refused towards external upstreams; Cedar decides the model, every fallback model and everything that can act (tools of every form) |
//! | mask | [`mask`] | every string, key and number of the body masked for the upstream's trust level; a failure refuses |
//! | place | [`place`] | the step's trajectory and parent |
//! | forward | [`forward`] | the upstream gets the proxy's own serialisation of what was decided, and an allow-list of headers |
//! | restore | [`restore`] | placeholders restored in the reply; what the client received is what is recorded |
//! | record | [`record`] | the step masked for storage (token ids of a masked reply dropped), its vault entries, the decision's audit event |
//!
//! The stages are functions over plain data (headers, bytes, the parsed request) and the
//! shared state; [`crate::call`] runs them in order for one Pingora session.

pub mod admit;
pub mod decide;
pub mod forward;
pub mod mask;
pub mod place;
pub mod read;
pub mod record;
pub mod restore;
pub mod route;

/// A header map of `pairs`, a repeated name appended (for the stages' tests).
#[cfg(test)]
pub(crate) fn test_headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, value.parse().unwrap());
    }
    map
}
