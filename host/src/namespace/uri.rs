//! The syntax of resmux URIs: `SCHEME://PATH`, where the scheme belongs to the
//! host and the path to a plugin. Every URI from a client and every path from
//! a plugin passes through here before it is used.

use thiserror::Error;

/// The longest URI resmux accepts, in bytes.
pub const MAX_URI_LENGTH: usize = 8 * 1024;

/// Why a URI, path, scheme or template was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SyntaxError {
    #[error("is longer than {MAX_URI_LENGTH} bytes")]
    TooLong,
    #[error("has no scheme (expected SCHEME://PATH)")]
    NoScheme,
    #[error(
        "has an invalid scheme {0:?} (expected a lowercase letter, then letters, digits, '+', '-' or '.')"
    )]
    BadScheme(String),
    #[error("contains {0:?}, which is not allowed in a URI")]
    BadCharacter(char),
    #[error("has a '%' not followed by two hexadecimal digits")]
    BadEscape,
    #[error("has a fragment ('#'), which resources cannot have")]
    Fragment,
    #[error("names a scheme of its own ('://'); paths are relative to the plugin's scheme")]
    NestedScheme,
    #[error("has unbalanced or nested braces")]
    Braces,
    #[error("has an invalid template expression {{{expression}}}: {why}")]
    BadExpression {
        expression: String,
        why: &'static str,
    },
    #[error(
        "has {0:?} after a fragment expression, so an expansion would have a second fragment ('#')"
    )]
    SecondFragment(String),
    #[error(
        "has {0:?} after a fragment expression, so an expansion would have a query inside its fragment"
    )]
    QueryAfterFragment(String),
}

/// Checks a scheme an operator or manifest chose.
pub fn check_scheme(scheme: &str) -> Result<(), SyntaxError> {
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
    if valid {
        Ok(())
    } else {
        Err(SyntaxError::BadScheme(scheme.to_owned()))
    }
}

/// A resource URI, checked, in the one spelling the host keys on: its
/// scheme lowercased (schemes are case-insensitive, RFC 3986 section 3.1),
/// so that `NOTES://x` and `notes://x` are one resource to the response
/// cache, to subscriptions, to change events and to the audit log. Its path
/// is kept as written: paths belong to the plugin, which may tell `a//b`
/// from `a/b`. Made once, at the edge: from a client's text by
/// [`Uri::parse`], from a plugin's path by [`Uri::in_scheme`]. Access
/// decisions see its [`Canonical`] form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uri(Schemed);

impl Uri {
    /// Checks a client's `uri`, lowercasing its scheme.
    pub fn parse(uri: &str) -> Result<Self, SyntaxError> {
        Schemed::parse(uri, check_path).map(Self)
    }

    /// The URI of a plugin's `path` under `scheme`: the one way a path a
    /// plugin names (in a listing, a read or a change report) becomes a URI,
    /// held to the rules of a client's, so a client can always ask for it.
    pub fn in_scheme(scheme: &str, path: &str) -> Result<Self, SyntaxError> {
        Schemed::checked(scheme, path, check_path).map(Self)
    }

    /// The URI, its scheme lowercased.
    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The URI's text, for the wire.
    pub fn into_string(self) -> String {
        self.0.text
    }

    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    /// The scheme-relative path the plugin sees.
    pub fn path(&self) -> &str {
        self.0.rest()
    }

    /// The URI as access decisions see it.
    pub fn canonical(&self) -> Canonical {
        Canonical::of(self.scheme(), self.path())
    }

    /// Whether access decisions see the URI as it is written (no escapes,
    /// no dot or empty segments, no leading or trailing slash).
    pub fn is_canonical(&self) -> bool {
        self.canonical().path() == self.path()
    }
}

impl std::fmt::Display for Uri {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A URI template (RFC 6570), checked once, with its scheme lowercased and
/// the names of its variables: `SCHEME://PATH-TEMPLATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    spelled: Schemed,
    variables: Vec<String>,
}

impl UriTemplate {
    /// Checks a client's `template`, lowercasing its scheme.
    pub fn parse(template: &str) -> Result<Self, SyntaxError> {
        Schemed::parse(template, check_path_template).map(Self::with_variables)
    }

    /// The template of a plugin's `path_template` under `scheme`.
    pub fn in_scheme(scheme: &str, path_template: &str) -> Result<Self, SyntaxError> {
        Schemed::checked(scheme, path_template, check_path_template).map(Self::with_variables)
    }

    fn with_variables(spelled: Schemed) -> Self {
        let variables = template_variables(spelled.rest())
            .into_iter()
            .map(str::to_owned)
            .collect();
        Self { spelled, variables }
    }

    pub fn as_str(&self) -> &str {
        &self.spelled.text
    }

    /// The template's text, for the wire.
    pub fn into_string(self) -> String {
        self.spelled.text
    }

    pub fn scheme(&self) -> &str {
        self.spelled.scheme()
    }

    /// The scheme-relative path template the plugin sees.
    pub fn path(&self) -> &str {
        self.spelled.rest()
    }

    /// The names of its variables, in order.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// The template as access decisions see it.
    pub fn canonical(&self) -> Canonical {
        Canonical::of(self.scheme(), self.path())
    }
}

impl std::fmt::Display for UriTemplate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A URI (or template) in the one form access policies see: its path's
/// percent-escapes decoded (invalid UTF-8 as U+FFFD), `.` and `..` segments
/// resolved (never above the root), empty segments (doubled, leading or
/// trailing slashes) dropped. So no spelling that a plugin would serve
/// alike slips past a policy written for another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical(Schemed);

impl Canonical {
    /// The canonical form of `path` under `scheme`, whether or not it would
    /// pass as a URI (a template expanded with a client's value, say).
    pub fn of(scheme: &str, path: &str) -> Self {
        let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
        let mut segments: Vec<&str> = Vec::new();
        for segment in decoded.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                segment => segments.push(segment),
            }
        }
        Self(Schemed::joined(scheme, &segments.join("/")))
    }

    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    pub fn path(&self) -> &str {
        self.0.rest()
    }
}

/// `SCHEME://REST` as one string, and where its scheme ends: what a URI, a
/// template and a canonical form share.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Schemed {
    text: String,
    scheme_length: usize,
}

impl Schemed {
    /// A client's `text`, split at its first `://` with the scheme
    /// lowercased, checked as [`Self::checked`].
    fn parse(
        text: &str,
        check_rest: fn(&str) -> Result<(), SyntaxError>,
    ) -> Result<Self, SyntaxError> {
        if text.len() > MAX_URI_LENGTH {
            return Err(SyntaxError::TooLong);
        }
        let (scheme, rest) = text.split_once("://").ok_or(SyntaxError::NoScheme)?;
        Self::checked(&scheme.to_ascii_lowercase(), rest, check_rest)
    }

    /// `scheme` and `rest` joined, once the whole is no longer than
    /// [`MAX_URI_LENGTH`], the scheme valid and `rest` passes `check_rest`.
    fn checked(
        scheme: &str,
        rest: &str,
        check_rest: fn(&str) -> Result<(), SyntaxError>,
    ) -> Result<Self, SyntaxError> {
        if scheme.len() + "://".len() + rest.len() > MAX_URI_LENGTH {
            return Err(SyntaxError::TooLong);
        }
        check_scheme(scheme)?;
        check_rest(rest)?;
        Ok(Self::joined(scheme, rest))
    }

    fn joined(scheme: &str, rest: &str) -> Self {
        // Pushed, not `format!`ed: this runs twice a read, and the
        // formatting machinery cost 2% of a stdio read's CPU (`perf`).
        let mut text = String::with_capacity(scheme.len() + "://".len() + rest.len());
        text.push_str(scheme);
        text.push_str("://");
        text.push_str(rest);
        Self {
            text,
            scheme_length: scheme.len(),
        }
    }

    fn scheme(&self) -> &str {
        &self.text[..self.scheme_length]
    }

    fn rest(&self) -> &str {
        &self.text[self.scheme_length + "://".len()..]
    }
}

/// Checks that `text` holds only what RFC 3986 allows in a URI: its
/// characters, valid escapes, and at most one `#`, before its fragment.
pub fn check_characters(text: &str) -> Result<(), SyntaxError> {
    let (before, fragment) = text.split_once('#').unwrap_or((text, ""));
    check_literal(before)?;
    check_literal(fragment)
}

/// Checks a scheme-relative path: RFC 3986 characters only, valid escapes, no
/// fragment and no scheme of its own.
fn check_path(path: &str) -> Result<(), SyntaxError> {
    if path.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    if path.contains("://") {
        return Err(SyntaxError::NestedScheme);
    }
    check_literal(path)
}

/// Checks a scheme-relative RFC 6570 template: literal parts as for paths,
/// expressions in single braces with an operator RFC 6570 defines and
/// variable names it allows, and no expansion that is not an RFC 3986 URI a
/// client can send: nothing that opens a query or another fragment once a
/// `{#...}` expression has opened the fragment.
fn check_path_template(template: &str) -> Result<(), SyntaxError> {
    if template.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    if template.contains("://") {
        return Err(SyntaxError::NestedScheme);
    }
    let mut expanded = Component::Path;
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        expanded = literal_expanded(&rest[..open], expanded)?;
        if rest[open..].starts_with('}') {
            return Err(SyntaxError::Braces);
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or(SyntaxError::Braces)?;
        let expression = &after[..close];
        if expression.contains('{') {
            return Err(SyntaxError::Braces);
        }
        expanded = expression_expanded(expression, expanded)?;
        rest = &after[close + 1..];
    }
    literal_expanded(rest, expanded).map(|_| ())
}

/// The part of a URI that an expansion of a template has reached, in the
/// order RFC 3986 puts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    Path,
    Query,
    Fragment,
}

/// Checks a template's `literal` part (as a path's, so never a `#`), and
/// where an expansion stands after it, from where it stood before.
fn literal_expanded(literal: &str, before: Component) -> Result<Component, SyntaxError> {
    check_literal(literal)?;
    match (before, literal.contains('?')) {
        (Component::Fragment, true) => Err(SyntaxError::QueryAfterFragment(literal.to_owned())),
        (Component::Path, true) => Ok(Component::Query),
        (before, _) => Ok(before),
    }
}

/// Checks one expression (between its braces): an optional operator of
/// RFC 6570's, then variables, each a name with an optional prefix length
/// (`:1` to `:9999`) or explode (`*`); and where an expansion stands after
/// it, from where it stood before.
fn expression_expanded(expression: &str, before: Component) -> Result<Component, SyntaxError> {
    let bad = |why| SyntaxError::BadExpression {
        expression: expression.to_owned(),
        why,
    };
    let (operator, variables) = match expression.strip_prefix(OPERATORS) {
        Some(variables) => (expression.chars().next(), variables),
        None if expression.starts_with(RESERVED_OPERATORS) => {
            return Err(bad("RFC 6570 reserves its operator for future extensions"));
        }
        None => (None, expression),
    };
    for spec in variables.split(',') {
        let name = match spec.split_once(':') {
            Some((name, length)) => {
                let digits = length.as_bytes();
                let valid_length = (1..=4).contains(&digits.len())
                    && digits.iter().all(u8::is_ascii_digit)
                    && digits[0] != b'0';
                if !valid_length {
                    return Err(bad("a prefix length is 1 to 9999, in digits"));
                }
                name
            }
            None => spec.strip_suffix('*').unwrap_or(spec),
        };
        if !is_variable_name(name) {
            return Err(bad(
                "a variable name is letters, digits, '_' and %XX escapes, with single dots between them",
            ));
        }
    }
    let fragment = || SyntaxError::SecondFragment(format!("{{{expression}}}"));
    let query = || SyntaxError::QueryAfterFragment(format!("{{{expression}}}"));
    match (operator, before) {
        (Some('#'), Component::Fragment) => Err(fragment()),
        (Some('#'), _) => Ok(Component::Fragment),
        (Some('?' | '&'), Component::Fragment) => Err(query()),
        (Some('?' | '&'), _) => Ok(Component::Query),
        (_, before) => Ok(before),
    }
}

/// Whether `name` is an RFC 6570 `varname`: `varchar *( ["."] varchar )`,
/// where a `varchar` is a letter, a digit, `_` or a `%XX` escape.
fn is_variable_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut index = 0;
    let mut wants_character = true;
    while index < bytes.len() {
        match bytes[index] {
            b'.' if !wants_character => wants_character = true,
            b'%' => {
                let escape = bytes.get(index + 1..index + 3);
                if !escape.is_some_and(|escape| escape.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                index += 2;
                wants_character = false;
            }
            byte if byte.is_ascii_alphanumeric() || byte == b'_' => wants_character = false,
            _ => return false,
        }
        index += 1;
    }
    !wants_character
}

/// The names of the variables in a checked path template, in order.
fn template_variables(template: &str) -> Vec<&str> {
    template
        .split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(expression, _)| expression))
        .flat_map(|expression| {
            expression
                .strip_prefix(OPERATORS)
                .unwrap_or(expression)
                .split(',')
        })
        .map(|spec| spec.split([':', '*']).next().unwrap_or(spec))
        .collect()
}

/// The operators RFC 6570 defines, and those it reserves for later.
const OPERATORS: &[char] = &['+', '#', '.', '/', ';', '?', '&'];
const RESERVED_OPERATORS: &[char] = &['=', ',', '!', '@', '|'];

fn check_literal(text: &str) -> Result<(), SyntaxError> {
    let bytes = text.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                let escape = bytes
                    .get(index + 1..index + 3)
                    .ok_or(SyntaxError::BadEscape)?;
                if !escape.iter().all(u8::is_ascii_hexdigit) {
                    return Err(SyntaxError::BadEscape);
                }
                index += 3;
                continue;
            }
            b'#' => return Err(SyntaxError::Fragment),
            byte if byte.is_ascii_alphanumeric() || b"-._~:/?[]@!$&'()*+,;=".contains(&byte) => {}
            _ => {
                let character = text[index..].chars().next().unwrap_or('\u{fffd}');
                return Err(SyntaxError::BadCharacter(character));
            }
        }
        index += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(uri: &str) -> Result<(String, String), SyntaxError> {
        Uri::parse(uri).map(|uri| (uri.scheme().to_owned(), uri.path().to_owned()))
    }

    #[test]
    fn splits_and_lowercases_the_scheme() {
        assert_eq!(
            split("Notes://a/b%20c").unwrap(),
            ("notes".into(), "a/b%20c".into())
        );
        assert_eq!(
            split("files:///etc").unwrap(),
            ("files".into(), "/etc".into())
        );
    }

    #[test]
    fn refuses_malformed_uris() {
        assert_eq!(split("no-scheme"), Err(SyntaxError::NoScheme));
        assert_eq!(split("1x://a"), Err(SyntaxError::BadScheme("1x".into())));
        assert_eq!(split("a://b c"), Err(SyntaxError::BadCharacter(' ')));
        assert_eq!(split("a://b%zz"), Err(SyntaxError::BadEscape));
        assert_eq!(split("a://b%2"), Err(SyntaxError::BadEscape));
        assert_eq!(split("a://b#frag"), Err(SyntaxError::Fragment));
        assert_eq!(split("a://é"), Err(SyntaxError::BadCharacter('é')));
        assert_eq!(split("a://x\n"), Err(SyntaxError::BadCharacter('\n')));
        assert_eq!(
            split(&format!("a://{}", "x".repeat(MAX_URI_LENGTH))),
            Err(SyntaxError::TooLong)
        );
    }

    #[test]
    fn refuses_paths_naming_another_scheme() {
        assert_eq!(
            check_path("test://static-text"),
            Err(SyntaxError::NestedScheme)
        );
        assert_eq!(check_path("notes/1"), Ok(()));
    }

    #[test]
    fn checks_templates() {
        assert_eq!(check_path_template("forecast/{city}/{date}"), Ok(()));
        assert_eq!(check_path_template("search{?q,limit:3}{#section}"), Ok(()));
        assert_eq!(check_path_template("{+path*}"), Ok(()));
        assert_eq!(check_path_template("a/{b"), Err(SyntaxError::Braces));
        assert_eq!(check_path_template("a/}b"), Err(SyntaxError::Braces));
        assert_eq!(check_path_template("a/{{b}}"), Err(SyntaxError::Braces));
        let names = "a variable name is letters, digits, '_' and %XX escapes, with single dots between them";
        for (template, expression) in [
            ("a/{}", ""),
            ("a/{b c}", "b c"),
            ("a/{+}", "+"),
            ("a/{b,}", "b,"),
            ("a/{e%}", "e%"),
            ("a/{e%4}", "e%4"),
            ("a/{e%zz}", "e%zz"),
            ("a/{..b}", "..b"),
            ("a/{b.}", "b."),
            ("a/{b..c}", "b..c"),
            ("a/{b-c}", "b-c"),
            ("a/{++b}", "++b"),
            ("a/{b*:3}", "b*:3"),
        ] {
            assert_eq!(
                check_path_template(template),
                Err(SyntaxError::BadExpression {
                    expression: expression.into(),
                    why: names
                }),
                "{template}"
            );
        }
        for (template, expression) in [
            ("a/{b:0}", "b:0"),
            ("a/{b:10000}", "b:10000"),
            ("a/{b:}", "b:"),
            ("a/{b:x}", "b:x"),
            ("a/{b:3*}", "b:3*"),
        ] {
            assert_eq!(
                check_path_template(template),
                Err(SyntaxError::BadExpression {
                    expression: expression.into(),
                    why: "a prefix length is 1 to 9999, in digits"
                }),
                "{template}"
            );
        }
        for operator in ['=', ',', '!', '@', '|'] {
            assert_eq!(
                check_path_template(&format!("a/{{{operator}b}}")),
                Err(SyntaxError::BadExpression {
                    expression: format!("{operator}b"),
                    why: "RFC 6570 reserves its operator for future extensions"
                })
            );
        }
        for template in [
            "{a%20b}",
            "{a.b_c9}",
            "{_}",
            "{x:9999}",
            "{x:1,y*}",
            "{;a,b}{.c}{/d*}",
        ] {
            assert_eq!(check_path_template(template), Ok(()), "{template}");
        }
        let template = UriTemplate::parse("W://forecast/{city}").unwrap();
        assert_eq!(template.as_str(), "w://forecast/{city}");
        assert_eq!(template.path(), "forecast/{city}");
        assert_eq!(template.variables(), ["city"]);
    }

    #[test]
    fn refuses_templates_whose_expansions_are_no_uri() {
        for (template, after) in [
            ("{#a}{#b}", "{#b}"),
            ("d{#e}//s{;e}/{#f}", "{#f}"),
            ("{#a}/x{#b,c}", "{#b,c}"),
        ] {
            assert_eq!(
                check_path_template(template),
                Err(SyntaxError::SecondFragment(after.into())),
                "{template}"
            );
        }
        for (template, after) in [
            ("{#a}{?b}", "{?b}"),
            ("{#a}{&b}", "{&b}"),
            ("{#a}?b", "?b"),
            ("x{#a}/y?z={b}", "/y?z="),
        ] {
            assert_eq!(
                check_path_template(template),
                Err(SyntaxError::QueryAfterFragment(after.into())),
                "{template}"
            );
        }
        for template in [
            "a{?b}{&c}{#d}",
            "a?b={b}{&c}{#d}",
            "{#d}/{e}{.f}{;g}{/h}{+i}",
            "x{?q}{?r}",
        ] {
            assert_eq!(check_path_template(template), Ok(()), "{template}");
        }
        let crash =
            "d]aft{#e%}?//s]aft{;e%}!!!!!!!!!!!!!/d]aft{#e%}?!!!!!!!!?//s]aft{;e%}!!!!!!!!!!!!!!";
        assert!(UriTemplate::in_scheme("z", crash).is_err());
        let message = UriTemplate::in_scheme("z", "{#a}{#b}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "has \"{#b}\" after a fragment expression, so an expansion would have a second fragment ('#')"
        );
    }

    #[test]
    fn names_template_variables() {
        assert_eq!(
            template_variables("f/{city}/{+date:4}{?q,x*}"),
            ["city", "date", "q", "x"]
        );
    }

    #[test]
    fn canonical_form_merges_spellings_a_plugin_serves_alike() {
        for spelling in [
            "drafts/q1",
            "drafts//q1",
            "/drafts/q1/",
            "drafts/./q1",
            "x/../drafts/q1",
            "../../drafts/q1",
            "drafts%2Fq1",
            "%64rafts/q1",
        ] {
            let uri = Uri::in_scheme("notes", spelling).unwrap();
            assert_eq!(uri.canonical().as_str(), "notes://drafts/q1", "{spelling}");
            assert_eq!(uri.is_canonical(), spelling == "drafts/q1", "{spelling}");
        }
        let odd = Uri::in_scheme("notes", "a%20b/%FF").unwrap();
        assert_eq!(odd.canonical().path(), "a b/\u{fffd}");
        assert_eq!(Uri::in_scheme("notes", "").unwrap().canonical().path(), "");
    }
}
