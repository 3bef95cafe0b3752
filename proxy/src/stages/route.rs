//! Route: the upstream a model goes to and the model name sent there (routes are tried in
//! order, first match wins; an alias rewrites the name). No route is a 404.

use crate::config::{Config, Upstream};
use crate::refusal::Refusal;

/// The upstream and the dispatched model name for `model`.
pub fn route(config: &Config, model: &str) -> Result<(Upstream, String), Refusal> {
    config
        .route(model)
        .map(|(upstream, dispatched)| (upstream.clone(), dispatched))
        .ok_or_else(|| Refusal::ModelNotFound {
            model: model.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    #[test]
    fn a_model_without_a_route_is_not_found() {
        let config = RawConfig::from_toml(
            "policy = \"p\"\n[[upstream]]\nname = \"a\"\nurl = \"http://x\"\n[[route]]\nmodel = \"gpt-*\"\nupstream = \"a\"\nrewrite = \"o-*\"\n",
        )
        .unwrap()
        .validate()
        .unwrap();
        let (upstream, model) = route(&config, "gpt-4").unwrap();
        assert_eq!((upstream.name.as_str(), model.as_str()), ("a", "o-4"));
        assert_eq!(
            route(&config, "claude").unwrap_err().code(),
            "model_not_found"
        );
    }
}
