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
    #[error("has an invalid template expression {0:?}")]
    BadExpression(String),
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

/// A client's resource URI, checked, in the one spelling the host keys on:
/// its scheme lowercased (schemes are case-insensitive, RFC 3986 section
/// 3.1), so that `NOTES://x` and `notes://x` are one resource to the
/// response cache, to subscriptions and to change events. Parsed once, where
/// a request comes in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uri {
    text: String,
    scheme_length: usize,
}

impl Uri {
    /// Checks `uri` and puts it in canonical form.
    pub fn parse(uri: &str) -> Result<Self, SyntaxError> {
        let (scheme, path) = split(uri)?;
        Ok(Self {
            text: format!("{scheme}://{path}"),
            scheme_length: scheme.len(),
        })
    }

    /// The URI in canonical form.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn scheme(&self) -> &str {
        &self.text[..self.scheme_length]
    }

    /// The scheme-relative path the plugin sees.
    pub fn path(&self) -> &str {
        &self.text[self.scheme_length + "://".len()..]
    }
}

impl std::fmt::Display for Uri {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.text)
    }
}

/// Splits a client's URI into its scheme (lowercased) and path, checking both.
fn split(uri: &str) -> Result<(String, &str), SyntaxError> {
    if uri.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    let (scheme, path) = uri.split_once("://").ok_or(SyntaxError::NoScheme)?;
    let scheme = scheme.to_ascii_lowercase();
    check_scheme(&scheme)?;
    check_path(path)?;
    Ok((scheme, path))
}

/// Splits a URI template into its scheme (lowercased) and path template.
pub fn split_template(template: &str) -> Result<(String, &str), SyntaxError> {
    if template.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    let (scheme, path) = template.split_once("://").ok_or(SyntaxError::NoScheme)?;
    let scheme = scheme.to_ascii_lowercase();
    check_scheme(&scheme)?;
    check_path_template(path)?;
    Ok((scheme, path))
}

/// The scheme-relative path of a URI (or URI template) the namespace made:
/// what follows `scheme://`.
pub fn path_of(uri: &str) -> &str {
    uri.split_once("://").map_or("", |(_, path)| path)
}

/// Checks a scheme-relative path: RFC 3986 characters only, valid escapes, no
/// fragment and no scheme of its own.
pub fn check_path(path: &str) -> Result<(), SyntaxError> {
    if path.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    if path.contains("://") {
        return Err(SyntaxError::NestedScheme);
    }
    check_literal(path)
}

/// Checks a scheme-relative RFC 6570 template: literal parts as for paths,
/// expressions in single braces with an optional operator and variable names.
pub fn check_path_template(template: &str) -> Result<(), SyntaxError> {
    if template.len() > MAX_URI_LENGTH {
        return Err(SyntaxError::TooLong);
    }
    if template.contains("://") {
        return Err(SyntaxError::NestedScheme);
    }
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        check_literal(&rest[..open])?;
        if rest[open..].starts_with('}') {
            return Err(SyntaxError::Braces);
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or(SyntaxError::Braces)?;
        let expression = &after[..close];
        if expression.contains('{') {
            return Err(SyntaxError::Braces);
        }
        check_expression(expression)?;
        rest = &after[close + 1..];
    }
    check_literal(rest)
}

/// The names of the variables in a path template, in order.
pub fn template_variables(template: &str) -> Vec<&str> {
    template
        .split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(expression, _)| expression))
        .flat_map(|expression| expression.trim_start_matches(OPERATORS).split(','))
        .map(|spec| spec.split([':', '*']).next().unwrap_or(spec))
        .collect()
}

const OPERATORS: &[char] = &['+', '#', '.', '/', ';', '?', '&'];

fn check_expression(expression: &str) -> Result<(), SyntaxError> {
    let bad = || SyntaxError::BadExpression(expression.to_owned());
    let variables = expression.strip_prefix(OPERATORS).unwrap_or(expression);
    for spec in variables.split(',') {
        let name = match spec.split_once(':') {
            Some((name, length)) => {
                if length.is_empty()
                    || length.len() > 4
                    || !length.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(bad());
                }
                name
            }
            None => spec.strip_suffix('*').unwrap_or(spec),
        };
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%');
        if !valid_name {
            return Err(bad());
        }
    }
    Ok(())
}

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

    #[test]
    fn splits_and_lowercases_the_scheme() {
        assert_eq!(
            split("Notes://a/b%20c").unwrap(),
            ("notes".into(), "a/b%20c")
        );
        assert_eq!(split("files:///etc").unwrap(), ("files".into(), "/etc"));
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
        assert_eq!(
            check_path_template("a/{}"),
            Err(SyntaxError::BadExpression(String::new()))
        );
        assert_eq!(
            check_path_template("a/{b c}"),
            Err(SyntaxError::BadExpression("b c".into()))
        );
        assert_eq!(
            split_template("w://forecast/{city}").unwrap(),
            ("w".into(), "forecast/{city}")
        );
    }

    #[test]
    fn names_template_variables() {
        assert_eq!(
            template_variables("f/{city}/{+date:4}{?q,x*}"),
            ["city", "date", "q", "x"]
        );
    }
}
