//! `resmux policy`: the access policy explained offline. `schema` prints the
//! entities and actions policies speak of; `check` makes one decision the
//! way `serve` would, for a tokens-file client or an issuer's, and says which
//! policies made it. A denial exits with status 1.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use resmux::access::policy::SCHEMA;
use resmux::namespace::Action;
use resmux::namespace::uri::{Canonical, Uri, UriTemplate};

// Parsed once per process: the size of a variant costs nothing (Windows'
// paths are wider, which makes clippy count it there).
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Print the Cedar schema of resmux's entities and actions.
    Schema,
    /// Decide one action on one URI and say why.
    Check {
        /// The Cedar access policy, as given to `serve --access-policy`.
        #[arg(long, env = "RESMUX_ACCESS_POLICY")]
        access_policy: Option<PathBuf>,
        /// The tokens file, as given to `serve --tokens`.
        #[arg(long, env = "RESMUX_TOKENS")]
        tokens: Option<PathBuf>,
        /// The auth file, as given to `serve --auth`.
        #[arg(long, env = "RESMUX_AUTH")]
        auth: Option<PathBuf>,
        /// Who asks: a tokens-file client's name, or `oauth:SUBJECT` for
        /// the bearer of an issuer's token with that `sub`.
        #[arg(long)]
        principal: String,
        /// A group the token names (oauth: principals). Repeatable.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// A scope the token carries (oauth: principals). Repeatable.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// The token's client id (oauth: principals).
        #[arg(long)]
        client_id: Option<String>,
        /// list, read, subscribe or complete.
        #[arg(long, value_parser = parse_action)]
        action: Action,
        /// The resource's URI, or the template's for `complete`.
        uri: String,
    },
}

fn parse_action(name: &str) -> Result<Action, String> {
    Action::ALL
        .into_iter()
        .find(|action| action.name() == name)
        .ok_or_else(|| format!("{name:?} is none of list, read, subscribe, complete"))
}

pub fn run(command: PolicyCommand) -> Result<()> {
    match command {
        PolicyCommand::Schema => {
            print!("{SCHEMA}");
            Ok(())
        }
        PolicyCommand::Check {
            access_policy,
            tokens,
            auth,
            principal,
            groups,
            scopes,
            client_id,
            action,
            uri,
        } => {
            let admission = super::serve::admission(
                tokens.as_deref(),
                auth.as_deref(),
                access_policy.as_deref(),
                None,
            )?
            .context("give the tokens file (--tokens) or the auth file (--auth) the server uses")?;
            let client = admission.client_named(
                &principal,
                groups.into_iter().collect::<BTreeSet<_>>(),
                scopes.into_iter().collect(),
                client_id,
            )?;
            let resource = canonical(action, &uri)?;
            let verdict = client.scope.decide(action, || resource);
            let word = if verdict.permitted { "ALLOW" } else { "DENY" };
            println!("{word} {} {uri} for {principal}", action.name());
            if verdict.by.is_empty() {
                println!("  no policy permits it");
            }
            for id in &verdict.by {
                let how = if verdict.permitted {
                    "permitted by"
                } else {
                    "forbidden by"
                };
                println!("  {how} {id}:");
                let text = admission.policy().text_of(id).unwrap_or_default();
                for line in text.lines() {
                    println!("    {line}");
                }
            }
            if !verdict.permitted {
                bail!("{principal} may not {} {uri}", action.name());
            }
            Ok(())
        }
    }
}

/// `uri` as `serve`'s access decisions see it: a template for completions,
/// a resource otherwise.
fn canonical(action: Action, uri: &str) -> Result<Canonical> {
    if action == Action::Complete {
        let template = UriTemplate::parse(uri)
            .map_err(|reason| anyhow::anyhow!("template {uri:?} {reason}"))?;
        return Ok(template.canonical());
    }
    let parsed =
        Uri::parse(uri).map_err(|reason| anyhow::anyhow!("invalid URI {uri:?}: it {reason}"))?;
    Ok(parsed.canonical())
}
