//! What a policy set says of one client's action on a whole scheme, read from
//! the policies' scopes alone: nothing can be permitted there (no permit's
//! scope can match), everything is (an unconditional permit matches the
//! whole scheme and no forbid's scope can match), or each entry must be
//! decided. Listings skip a scheme of the first kind and do not evaluate
//! entries of the second.

use std::collections::HashSet;

use cedar_policy::{
    ActionConstraint, Effect, EntityUid, Policy, PrincipalConstraint, ResourceConstraint,
};

use super::{CLIENT, RESOURCE, SCHEME};
use crate::namespace::Outlook;

/// The scope of one policy.
#[derive(Debug)]
pub struct Rule {
    effect: Effect,
    principal: PrincipalConstraint,
    action: ActionConstraint,
    resource: ResourceConstraint,
    /// No `when` or `unless`.
    unconditional: bool,
}

/// Whether a policy's resource scope can match resources of one scheme.
#[derive(PartialEq)]
enum Reach {
    None,
    Some,
    All,
}

impl Rule {
    pub fn of(policy: &Policy) -> Self {
        let unconditional = policy.to_json().is_ok_and(|json| {
            json.get("conditions")
                .and_then(|conditions| conditions.as_array())
                .is_some_and(Vec::is_empty)
        });
        Self {
            effect: policy.effect(),
            principal: policy.principal_constraint(),
            action: policy.action_constraint(),
            resource: policy.resource_constraint(),
            unconditional,
        }
    }

    fn covers_principal(&self, client: &EntityUid, groups: &HashSet<EntityUid>) -> bool {
        let is_client = |name: &cedar_policy::EntityTypeName| name.to_string() == CLIENT;
        let contains = |uid: &EntityUid| uid == client || groups.contains(uid);
        match &self.principal {
            PrincipalConstraint::Any => true,
            PrincipalConstraint::Eq(uid) => uid == client,
            PrincipalConstraint::In(uid) => contains(uid),
            PrincipalConstraint::Is(name) => is_client(name),
            PrincipalConstraint::IsIn(name, uid) => is_client(name) && contains(uid),
        }
    }

    fn covers_action(&self, action: &EntityUid) -> bool {
        match &self.action {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(uid) => uid == action,
            ActionConstraint::In(uids) => uids.contains(action),
        }
    }

    fn reach(&self, scheme: &str) -> Reach {
        let of_type = |uid: &EntityUid, name: &str| uid.type_name().to_string() == name;
        let within = |uid: &EntityUid| {
            if of_type(uid, SCHEME) {
                if uid.id().unescaped() == scheme {
                    Reach::All
                } else {
                    Reach::None
                }
            } else if of_type(uid, RESOURCE) {
                let uri = uid.id().unescaped();
                match uri.split_once("://") {
                    Some((of, _)) if of == scheme => Reach::Some,
                    _ => Reach::None,
                }
            } else {
                // A resource is in its scheme alone.
                Reach::None
            }
        };
        match &self.resource {
            ResourceConstraint::Any => Reach::All,
            ResourceConstraint::Is(name) if name.to_string() == RESOURCE => Reach::All,
            ResourceConstraint::Is(_) => Reach::None,
            ResourceConstraint::In(uid) => within(uid),
            ResourceConstraint::IsIn(name, uid) if name.to_string() == RESOURCE => within(uid),
            ResourceConstraint::IsIn(..) => Reach::None,
            ResourceConstraint::Eq(uid) if of_type(uid, RESOURCE) => match within(uid) {
                Reach::None => Reach::None,
                _ => Reach::Some,
            },
            ResourceConstraint::Eq(_) => Reach::None,
        }
    }
}

/// What `rules` say of `action` by `client` (a member of `groups`) on every
/// resource of `scheme`.
pub fn outlook(
    rules: &[Rule],
    client: &EntityUid,
    groups: &HashSet<EntityUid>,
    action: &EntityUid,
    scheme: &str,
) -> Outlook {
    let (mut permits, mut permits_all, mut forbids) = (false, false, false);
    for rule in rules {
        if !rule.covers_principal(client, groups) || !rule.covers_action(action) {
            continue;
        }
        match (rule.effect, rule.reach(scheme)) {
            (_, Reach::None) => {}
            (Effect::Forbid, _) => forbids = true,
            (Effect::Permit, reach) => {
                permits = true;
                permits_all |= reach == Reach::All && rule.unconditional;
            }
        }
    }
    match (permits, permits_all && !forbids) {
        (false, _) => Outlook::Nothing,
        (true, true) => Outlook::Everything,
        (true, false) => Outlook::EntryByEntry,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::str::FromStr;

    use cedar_policy::{EntityUid, PolicySet};

    use super::{Rule, outlook};
    use crate::namespace::Outlook;

    fn outlook_of(policies: &str, action: &str, scheme: &str) -> Outlook {
        let set = PolicySet::from_str(policies).unwrap();
        let rules: Vec<Rule> = set.policies().map(Rule::of).collect();
        let client = EntityUid::from_str(r#"Client::"carl""#).unwrap();
        let groups = HashSet::from([EntityUid::from_str(r#"Group::"finance""#).unwrap()]);
        let action = EntityUid::from_str(&format!(r#"Action::"{action}""#)).unwrap();
        outlook(&rules, &client, &groups, &action, scheme)
    }

    #[test]
    fn a_scheme_no_permit_can_reach_is_nothing() {
        let policies = r#"
            permit(principal in Group::"finance", action, resource in Scheme::"reports");
            permit(principal in Group::"sales", action, resource in Scheme::"notes");
            permit(principal, action == Action::"read", resource in Scheme::"notes");
            permit(principal, action, resource == Resource::"reports://x");
        "#;
        assert_eq!(outlook_of(policies, "list", "notes"), Outlook::Nothing);
        assert_eq!(outlook_of("", "list", "notes"), Outlook::Nothing);
    }

    #[test]
    fn an_unconditional_permit_of_the_scheme_without_forbids_is_everything() {
        let permit = r#"permit(principal in Group::"finance", action in [Action::"list", Action::"read"], resource in Scheme::"reports");"#;
        assert_eq!(outlook_of(permit, "list", "reports"), Outlook::Everything);
        let anything = "permit(principal, action, resource);";
        assert_eq!(outlook_of(anything, "list", "reports"), Outlook::Everything);
        let elsewhere =
            format!(r#"{permit} forbid(principal, action, resource in Scheme::"notes");"#);
        assert_eq!(
            outlook_of(&elsewhere, "list", "reports"),
            Outlook::Everything
        );
    }

    #[test]
    fn a_condition_a_forbid_or_a_single_resource_is_entry_by_entry() {
        let conditional = r#"permit(principal in Group::"finance", action, resource in Scheme::"reports") when { resource.path like "2026/*" };"#;
        assert_eq!(
            outlook_of(conditional, "list", "reports"),
            Outlook::EntryByEntry
        );
        let forbidden = r#"
            permit(principal, action, resource in Scheme::"reports");
            forbid(principal, action, resource) when { resource.path like "drafts/*" };
        "#;
        assert_eq!(
            outlook_of(forbidden, "list", "reports"),
            Outlook::EntryByEntry
        );
        let one = r#"permit(principal, action, resource == Resource::"reports://2026/q1");"#;
        assert_eq!(outlook_of(one, "list", "reports"), Outlook::EntryByEntry);
        assert_eq!(outlook_of(one, "list", "notes"), Outlook::Nothing);
    }
}
