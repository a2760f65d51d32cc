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

/// The scope of one policy, read once when the policy set is built.
#[derive(Debug)]
pub struct Rule {
    effect: Effect,
    principal: PrincipalConstraint,
    /// Whether an `is` in the principal's scope names `Client` (or there is
    /// none).
    principal_type_fits: bool,
    action: ActionConstraint,
    resource: Target,
    /// No `when` or `unless`.
    unconditional: bool,
}

/// What a policy's resource scope can match.
#[derive(Debug)]
enum Target {
    /// Every resource of every scheme.
    Everything,
    /// Every resource of this scheme.
    Scheme(String),
    /// Some resources of this scheme.
    PartOf(String),
    /// No resource at all.
    Nothing,
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
        let principal = policy.principal_constraint();
        let principal_type_fits = match &principal {
            PrincipalConstraint::Is(name) | PrincipalConstraint::IsIn(name, _) => {
                name.to_string() == CLIENT
            }
            _ => true,
        };
        Self {
            effect: policy.effect(),
            principal,
            principal_type_fits,
            action: policy.action_constraint(),
            resource: Target::of(&policy.resource_constraint()),
            unconditional: !policy.has_non_scope_constraint(),
        }
    }

    fn covers_principal(&self, client: &EntityUid, parents: &HashSet<EntityUid>) -> bool {
        let contains = |uid: &EntityUid| uid == client || parents.contains(uid);
        self.principal_type_fits
            && match &self.principal {
                PrincipalConstraint::Any | PrincipalConstraint::Is(_) => true,
                PrincipalConstraint::Eq(uid) => uid == client,
                PrincipalConstraint::In(uid) | PrincipalConstraint::IsIn(_, uid) => contains(uid),
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
        match &self.resource {
            Target::Everything => Reach::All,
            Target::Scheme(of) if of == scheme => Reach::All,
            Target::PartOf(of) if of == scheme => Reach::Some,
            _ => Reach::None,
        }
    }
}

impl Target {
    fn of(constraint: &ResourceConstraint) -> Self {
        let of_type = |uid: &EntityUid, name: &str| uid.type_name().to_string() == name;
        // A resource is in its scheme alone.
        let within = |uid: &EntityUid| {
            if of_type(uid, SCHEME) {
                Self::Scheme(uid.id().unescaped().to_owned())
            } else if of_type(uid, RESOURCE) {
                Self::part_of(uid)
            } else {
                Self::Nothing
            }
        };
        match constraint {
            ResourceConstraint::Any => Self::Everything,
            ResourceConstraint::Is(name) if name.to_string() == RESOURCE => Self::Everything,
            ResourceConstraint::In(uid) => within(uid),
            ResourceConstraint::IsIn(name, uid) if name.to_string() == RESOURCE => within(uid),
            ResourceConstraint::Eq(uid) if of_type(uid, RESOURCE) => Self::part_of(uid),
            _ => Self::Nothing,
        }
    }

    /// The one resource `uid` names: part of its URI's scheme.
    fn part_of(uid: &EntityUid) -> Self {
        match uid.id().unescaped().split_once("://") {
            Some((scheme, _)) => Self::PartOf(scheme.to_owned()),
            None => Self::Nothing,
        }
    }
}

/// What `rules` say of `action` by `client` (in `parents`: its groups and
/// its issuer) on every resource of `scheme`.
pub fn outlook(
    rules: &[Rule],
    client: &EntityUid,
    parents: &HashSet<EntityUid>,
    action: &EntityUid,
    scheme: &str,
) -> Outlook {
    let (mut permits, mut permits_all, mut forbids) = (false, false, false);
    for rule in rules {
        if !rule.covers_principal(client, parents) || !rule.covers_action(action) {
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
