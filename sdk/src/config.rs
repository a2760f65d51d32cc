//! The operator's `[config]`, read key by key: each key taken out once, typed
//! with a clear error, and [`Config::finish`] refusing any key left over, so
//! a typo in a manifest never goes unnoticed.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::Error;

/// The configuration handed to `init`.
#[derive(Debug, Clone, Default)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self {
            values: pairs.into_iter().collect(),
        }
    }

    /// Takes `key` as text, if given.
    pub fn text(&mut self, key: &str) -> Option<String> {
        self.values.remove(key)
    }

    /// Takes `key` parsed as `T`, or `default` when it is not given.
    pub fn parse_or<T: FromStr>(&mut self, key: &str, default: T) -> Result<T, Error> {
        match self.values.remove(key) {
            None => Ok(default),
            Some(text) => text.parse().map_err(|_| {
                let type_name = std::any::type_name::<T>();
                let short = type_name.rsplit("::").next().unwrap_or(type_name);
                Error::InvalidInput(format!(
                    "config key {key:?} has the value {text:?}, which is not a valid {short}"
                ))
            }),
        }
    }

    /// Refuses any key not taken yet.
    pub fn finish(self) -> Result<(), Error> {
        match self.values.keys().next() {
            None => Ok(()),
            Some(key) => Err(Error::InvalidInput(format!("unknown config key {key:?}"))),
        }
    }
}
