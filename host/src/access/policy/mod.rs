//! The access policy: one Cedar policy set that decides every action of every
//! client on every resource. Its sources are the operator's policy file
//! (`--access-policy`, checked against [`SCHEMA`] at load), the `schemes` of
//! each tokens-file client (one generated policy per scheme), and, when an
//! issuer is configured but no policy file is, one generated policy that
//! lets the issuer's clients use everything. Cedar denies whatever no policy
//! permits, and a `forbid` overrides every `permit`.
//!
//! Each client gets a [`ClientGuard`]: the namespace's [`Guard`] for that
//! principal. Policies see a resource in its one canonical form
//! ([`Canonical`]), so that no spelling of a URI a plugin would serve the
//! same (escapes, dot segments, doubled or trailing slashes) slips past a
//! policy written for another.

pub mod outlook;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid, Policy,
    PolicyId, PolicySet, Request, RestrictedExpression, Schema, ValidationMode, Validator,
};
use serde_json::json;

use self::outlook::Rule;
use super::principal::Principal;
use crate::namespace::uri::Canonical;
use crate::namespace::{Action, Guard, Outlook, Verdict};

/// The entities and actions policies speak of, in Cedar's schema language.
pub const SCHEMA: &str = include_str!("schema.cedarschema");

pub const CLIENT: &str = "Client";
pub const GROUP: &str = "Group";
pub const ISSUER: &str = "Issuer";
pub const SCHEME: &str = "Scheme";
pub const RESOURCE: &str = "Resource";

/// A tokens-file client's `schemes`: `*` for every scheme.
pub struct SchemeGrant<'a> {
    pub client: &'a str,
    pub schemes: &'a [String],
}

/// The policy set every decision is made from.
pub struct AccessPolicy {
    policies: PolicySet,
    rules: Vec<Rule>,
    authorizer: Authorizer,
}

impl std::fmt::Debug for AccessPolicy {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_list()
            .entries(self.policies.policies().map(Policy::id))
            .finish()
    }
}

impl AccessPolicy {
    /// The policy set of an operator's `file` (if any), the tokens file's
    /// `grants`, and, without a file, every scheme for clients of
    /// `default_issuer`.
    pub fn build(
        file: Option<&Path>,
        grants: &[SchemeGrant<'_>],
        default_issuer: Option<&str>,
    ) -> Result<Self> {
        let mut policies = match file {
            Some(path) => read_file(path)?,
            None => PolicySet::new(),
        };
        for grant in grants {
            for policy in scheme_policies(grant)? {
                add(&mut policies, policy, "the tokens file")?;
            }
        }
        if let (None, Some(issuer)) = (file, default_issuer) {
            add(&mut policies, issuer_policy(issuer)?, "the auth file")?;
        }
        let rules = policies.policies().map(Rule::of).collect();
        Ok(Self {
            policies,
            rules,
            authorizer: Authorizer::new(),
        })
    }

    /// The guard of the client called `name`.
    pub fn guard(self: &Arc<Self>, name: &str, principal: &Principal) -> Arc<ClientGuard> {
        let parents: HashSet<EntityUid> = principal
            .groups
            .iter()
            .map(|group| uid(GROUP, group))
            .chain([uid(ISSUER, &principal.issuer)])
            .collect();
        let string = |text: &str| RestrictedExpression::new_string(text.to_owned());
        let attributes = HashMap::from([
            ("subject".to_owned(), string(&principal.subject)),
            ("client_id".to_owned(), string(&principal.client_id)),
            ("issuer".to_owned(), string(&principal.issuer)),
            (
                "scopes".to_owned(),
                RestrictedExpression::new_set(principal.scopes.iter().map(|scope| string(scope))),
            ),
        ]);
        let client = uid(CLIENT, name);
        let entity = Entity::new(client.clone(), attributes, parents.clone())
            .expect("string and set attributes always evaluate");
        let Principal {
            subject,
            client_id,
            issuer,
            groups,
            scopes,
        } = principal;
        Arc::new(ClientGuard {
            policy: self.clone(),
            key: format!("{name}\n{subject}\n{client_id}\n{issuer}\n{groups:?}\n{scopes:?}").into(),
            client,
            entity,
            parents,
        })
    }

    /// The text of the policy `id`, as Cedar prints it.
    pub fn text_of(&self, id: &str) -> Option<String> {
        self.policies
            .policy(&PolicyId::new(id))
            .map(ToString::to_string)
    }
}

/// What one client may do.
pub struct ClientGuard {
    policy: Arc<AccessPolicy>,
    /// The client's name and everything of its principal.
    key: Arc<str>,
    client: EntityUid,
    entity: Entity,
    /// Its groups and its issuer.
    parents: HashSet<EntityUid>,
}

impl std::fmt::Debug for ClientGuard {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(out, "ClientGuard({})", self.client)
    }
}

impl Guard for ClientGuard {
    fn decide(&self, action: Action, resource: &Canonical) -> Verdict {
        let (uri, scheme, path) = (resource.as_str(), resource.scheme(), resource.path());
        let string = |text: &str| RestrictedExpression::new_string(text.to_owned());
        let resource = Entity::new(
            uid(RESOURCE, uri),
            HashMap::from([
                ("scheme".to_owned(), string(scheme)),
                ("path".to_owned(), string(path)),
            ]),
            HashSet::from([uid(SCHEME, scheme)]),
        )
        .expect("string attributes always evaluate");
        let request = Request::new(
            self.client.clone(),
            action_uid(action),
            resource.uid(),
            Context::empty(),
            None,
        )
        .expect("a request without a schema is always valid");
        let entities = Entities::from_entities([self.entity.clone(), resource], None)
            .expect("a client and a resource are two distinct entities");
        let response =
            self.policy
                .authorizer
                .is_authorized(&request, &self.policy.policies, &entities);
        for error in response.diagnostics().errors() {
            tracing::warn!(
                client = %self.client,
                action = action.name(),
                uri,
                "an access policy failed to evaluate: {error}"
            );
        }
        let mut by: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|id| AsRef::<str>::as_ref(id).to_owned())
            .collect();
        by.sort();
        Verdict {
            permitted: response.decision() == Decision::Allow,
            by,
        }
    }

    fn key(&self) -> Arc<str> {
        self.key.clone()
    }

    fn outlook(&self, action: Action, scheme: &str) -> Outlook {
        outlook::outlook(
            &self.policy.rules,
            &self.client,
            &self.parents,
            &action_uid(action),
            scheme,
        )
    }
}

/// The operator's policy file, each policy named by its `@id` annotation or
/// else by its place in the file, checked against [`SCHEMA`].
fn read_file(path: &Path) -> Result<PolicySet> {
    let text = crate::operator_file::read_text(path, "access policy")?;
    let parsed = PolicySet::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "access policy {} does not parse: {}",
            path.display(),
            report(&error, &text)
        )
    })?;
    let file_name = path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.display().to_string(),
    );
    if parsed.templates().next().is_some() {
        bail!(
            "access policy {} holds a template (`?principal` or `?resource`); resmux takes \
             policies only",
            path.display()
        );
    }
    let mut named = PolicySet::new();
    let mut sorted: Vec<&Policy> = parsed.policies().collect();
    // Cedar names a file's policies `policy0`, `policy1`, … in their order.
    sorted.sort_by_key(|policy| {
        AsRef::<str>::as_ref(policy.id())
            .trim_start_matches("policy")
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    for (index, policy) in sorted.into_iter().enumerate() {
        let id = policy
            .annotation("id")
            .map_or_else(|| format!("{file_name}#{}", index + 1), str::to_owned);
        add(
            &mut named,
            policy.new_id(PolicyId::new(id)),
            &path.display().to_string(),
        )?;
    }
    let (schema, _) = Schema::from_cedarschema_str(SCHEMA).expect("the built-in schema parses");
    let validation = Validator::new(schema).validate(&named, ValidationMode::Strict);
    let errors: Vec<String> = validation
        .validation_errors()
        .map(|error| {
            let id: &str = error.policy_id().as_ref();
            format!("policy {id}: {}", report(error, &text))
        })
        .collect();
    if !errors.is_empty() {
        bail!(
            "access policy {} does not fit resmux's entities (see `resmux policy schema`): {}",
            path.display(),
            errors.join("; ")
        );
    }
    Ok(named)
}

fn add(policies: &mut PolicySet, policy: Policy, source: &str) -> Result<()> {
    let id: String = AsRef::<str>::as_ref(policy.id()).to_owned();
    policies
        .add(policy)
        .with_context(|| format!("policy {id:?} of {source} is named twice"))
}

/// `client` may use each of its schemes: one policy per scheme, or one for
/// every scheme.
fn scheme_policies(grant: &SchemeGrant<'_>) -> Result<Vec<Policy>> {
    let principal = json!({"op": "==", "entity": {"type": CLIENT, "id": grant.client}});
    let all = json!({"op": "All"});
    let each: Vec<(String, serde_json::Value)> = if grant.schemes.iter().any(|scheme| scheme == "*")
    {
        vec![(
            format!("tokens-file: {} may use every scheme", grant.client),
            all.clone(),
        )]
    } else {
        grant
            .schemes
            .iter()
            .map(|scheme| {
                (
                    format!("tokens-file: {} may use {scheme}", grant.client),
                    json!({"op": "in", "entity": {"type": SCHEME, "id": scheme}}),
                )
            })
            .collect()
    };
    each.into_iter()
        .map(|(id, resource)| {
            let policy = json!({
                "effect": "permit",
                "principal": principal,
                "action": all,
                "resource": resource,
                "conditions": [],
            });
            Policy::from_json(Some(PolicyId::new(&id)), policy)
                .with_context(|| format!("cannot make policy {id:?}"))
        })
        .collect()
}

/// Every client of `issuer` may use every scheme.
fn issuer_policy(issuer: &str) -> Result<Policy> {
    let id = "auth-file: every client of the issuer may use every scheme";
    let policy = json!({
        "effect": "permit",
        "principal": {"op": "in", "entity": {"type": ISSUER, "id": issuer}},
        "action": {"op": "All"},
        "resource": {"op": "All"},
        "conditions": [],
    });
    Policy::from_json(Some(PolicyId::new(id)), policy).context("cannot make the issuer's policy")
}

fn uid(type_name: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(
        EntityTypeName::from_str(type_name).expect("the built-in type names parse"),
        EntityId::new(id),
    )
}

fn action_uid(action: Action) -> EntityUid {
    uid("Action", action.name())
}

/// A Cedar error with the lines of `source` it points at and its help.
fn report(error: &dyn miette::Diagnostic, source: &str) -> String {
    let mut text = error.to_string();
    for label in error.labels().into_iter().flatten() {
        let before = source.get(..label.offset()).unwrap_or(source);
        let line = before.matches('\n').count() + 1;
        text.push_str(&format!(" (line {line})"));
    }
    if let Some(help) = error.help() {
        text.push_str(&format!("; {help}"));
    }
    for related in error.related().into_iter().flatten() {
        text.push_str(&format!("; {}", report(related, source)));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::{AccessPolicy, ClientGuard, SchemeGrant};
    use crate::access::principal::Principal;
    use crate::namespace::uri::Uri;
    use crate::namespace::{Action, Guard, Outlook};

    const PATHS: [&str; 6] = [
        "",
        "a",
        "2026/q1",
        "drafts/x",
        "%64rafts/x",
        "x/../drafts/y",
    ];

    /// Asserts the guard's contract: where the outlook says `Everything` or
    /// `Nothing`, Cedar decides so for every path; returns the outlook.
    fn checked_outlook(guard: &ClientGuard, action: Action, scheme: &str) -> Outlook {
        let outlook = guard.outlook(action, scheme);
        for path in PATHS {
            let resource = Uri::in_scheme(scheme, path).unwrap().canonical();
            let permitted = guard.decide(action, &resource).permitted;
            match outlook {
                Outlook::Everything => assert!(permitted, "{guard:?} {action:?} {scheme}://{path}"),
                Outlook::Nothing => assert!(!permitted, "{guard:?} {action:?} {scheme}://{path}"),
                Outlook::EntryByEntry => {}
            }
        }
        outlook
    }

    fn bearer(groups: &[&str]) -> Principal {
        Principal {
            subject: "bob".into(),
            client_id: "app".into(),
            issuer: "https://idp.example".into(),
            groups: groups.iter().map(|group| group.to_string()).collect(),
            scopes: BTreeSet::from(["mcp:read".to_owned()]),
        }
    }

    #[test]
    fn generated_policies_decide_whole_schemes_without_cedar_per_entry() {
        let schemes = vec!["notes".to_owned()];
        let grants = [SchemeGrant {
            client: "alice",
            schemes: &schemes,
        }];
        let policy =
            Arc::new(AccessPolicy::build(None, &grants, Some("https://idp.example")).unwrap());
        let alice = policy.guard(
            "alice",
            &Principal::of_tokens_file("alice", BTreeSet::new()),
        );
        let bob = policy.guard("oauth:bob", &bearer(&[]));
        for action in Action::ALL {
            assert_eq!(
                checked_outlook(&alice, action, "notes"),
                Outlook::Everything
            );
            assert_eq!(checked_outlook(&alice, action, "files"), Outlook::Nothing);
            assert_eq!(checked_outlook(&bob, action, "files"), Outlook::Everything);
        }
    }

    #[test]
    fn an_operators_policies_never_get_an_outlook_cedar_contradicts() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            r#"
            permit(principal in Group::"finance", action in [Action::"list", Action::"read"], resource in Scheme::"reports");
            forbid(principal, action, resource in Scheme::"reports") when { resource.path like "drafts/*" };
            permit(principal in Group::"sales", action, resource in Scheme::"notes") when { resource.path like "2026/*" };
            permit(principal, action == Action::"read", resource == Resource::"files://a");
            permit(principal in Group::"sales", action == Action::"list", resource in Scheme::"files");
            "#,
        )
        .unwrap();
        let policy = Arc::new(AccessPolicy::build(Some(file.path()), &[], None).unwrap());
        let mut seen = BTreeSet::new();
        for groups in [&["finance"][..], &["sales"], &[]] {
            let guard = policy.guard("oauth:bob", &bearer(groups));
            for action in Action::ALL {
                for scheme in ["reports", "notes", "files"] {
                    seen.insert(format!("{:?}", checked_outlook(&guard, action, scheme)));
                }
            }
        }
        let every = ["Everything", "Nothing", "EntryByEntry"].map(str::to_owned);
        assert_eq!(seen, BTreeSet::from(every), "each outlook is reached");
    }
}
