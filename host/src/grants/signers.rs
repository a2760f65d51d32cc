//! Who may sign a component pulled from a registry, and what vouches for a
//! signature: a manifest's `signed_by` and `[pull]` section, capped by the
//! `[signatures]` section of the ceiling as grants are capped by the
//! rest of it.
//!
//! ```toml
//! # NAME.toml
//! oci = "registry.example.com/team/weather:1.2"
//! signed_by = "keys/team.pub"            # a cosign public key, or:
//! # signed_by = { identity = "release@example.com", issuer = "https://idp.example.com" }
//! [pull]
//! poll_interval_s = 300                  # how often a tag is looked up again
//! max_component_mib = 64                 # the largest component pulled
//! require_log_entry = true               # false: a keyed signature needs no Rekor entry
//! fulcio_roots = "sigstore/fulcio.pem"   # the CA chain of keyless certificates
//! rekor_keys = "sigstore/rekor.pub"      # the keys of the transparency log
//!
//! # the ceiling
//! [signatures]
//! signers = ["keys/team.pub", { identity = "release@example.com", issuer = "https://idp.example.com" }]
//! fulcio_roots = "sigstore/fulcio.pem"
//! rekor_keys = "sigstore/rekor.pub"
//! require_log_entry = true
//! max_component_mib = 64
//! ```
//!
//! Once the ceiling has a `[signatures]` section, only its trust root counts
//! (a manifest that brought its own could vouch for any identity), and its
//! log requirement and size cap bind every manifest; once it lists signers,
//! a remote component must be signed by one of them, whatever its manifest
//! says. Locked mode requires such a list. Key files and the trust root are
//! read once, when the rules are settled: what is checked later is what
//! was compared then.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use serde::Deserialize;

/// Seconds between two looks at a tag, unless a manifest says otherwise.
const DEFAULT_POLL_INTERVAL_S: u64 = 300;

/// The largest component pulled, in MiB, unless a manifest or the ceiling
/// says otherwise.
const DEFAULT_MAX_COMPONENT_MIB: u64 = 64;

/// A signer a manifest or the ceiling names.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Signer {
    /// The file of a cosign public key (PEM).
    Key(PathBuf),
    /// A keyless signer, named by its certificate.
    Identity(Identity),
}

/// The identity in a keyless signer's certificate (its email or URI
/// subject alternative name) and the OIDC issuer that vouched for it; both
/// must match exactly.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub identity: String,
    pub issuer: String,
}

/// A manifest's `[pull]` section.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PullSection {
    pub poll_interval_s: u64,
    pub max_component_mib: Option<u64>,
    pub require_log_entry: bool,
    pub fulcio_roots: Option<PathBuf>,
    pub rekor_keys: Option<PathBuf>,
}

impl Default for PullSection {
    fn default() -> Self {
        Self {
            poll_interval_s: DEFAULT_POLL_INTERVAL_S,
            max_component_mib: None,
            require_log_entry: true,
            fulcio_roots: None,
            rekor_keys: None,
        }
    }
}

/// The ceiling's `[signatures]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureCeiling {
    #[serde(default)]
    signers: Vec<Signer>,
    fulcio_roots: Option<PathBuf>,
    rekor_keys: Option<PathBuf>,
    require_log_entry: Option<bool>,
    max_component_mib: Option<u64>,
}

impl SignatureCeiling {
    /// The section with its relative paths taken from `base`, the ceiling
    /// file's folder.
    pub(super) fn rooted_at(self, base: &Path) -> Self {
        let root = |path: PathBuf| base.join(path);
        Self {
            signers: self
                .signers
                .into_iter()
                .map(|signer| match signer {
                    Signer::Key(path) => Signer::Key(root(path)),
                    identity @ Signer::Identity(_) => identity,
                })
                .collect(),
            fulcio_roots: self.fulcio_roots.map(root),
            rekor_keys: self.rekor_keys.map(root),
            ..self
        }
    }
}

/// A signer as checked: the bytes of its key, read once, or its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    Key {
        /// The file the key was read from, to name it.
        path: PathBuf,
        der: Vec<u8>,
    },
    Identity(Identity),
}

impl Accepted {
    fn read(signer: Signer) -> Result<Self> {
        Ok(match signer {
            Signer::Key(path) => Self::Key {
                der: key_der(&path)?,
                path,
            },
            Signer::Identity(identity) => Self::Identity(identity),
        })
    }

    /// Whether both are the same signer: the same key bytes, or the same
    /// identity and issuer.
    fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Key { der, .. }, Self::Key { der: other, .. }) => der == other,
            (Self::Identity(identity), Self::Identity(other)) => identity == other,
            _ => false,
        }
    }
}

impl std::fmt::Display for Accepted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Key { path, .. } => write!(formatter, "key {}", path.display()),
            Self::Identity(Identity { identity, issuer }) => {
                write!(formatter, "identity {identity} (issuer {issuer})")
            }
        }
    }
}

/// What a remote component's signature must satisfy, settled from its
/// manifest and the ceiling, with every file it names read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureRules {
    /// Any one of them will do.
    pub signers: Vec<Accepted>,
    /// The Fulcio certificates keyless certificates chain to, as DER.
    pub fulcio_roots: Vec<Vec<u8>>,
    /// The Rekor keys log entries are checked against, as DER.
    pub rekor_keys: Vec<Vec<u8>>,
    pub require_log_entry: bool,
    pub max_component_bytes: u64,
}

impl SignatureRules {
    /// The rules for a remote component whose manifest (in `manifest_dir`)
    /// names `signed_by` and `pull`, under the `ceiling`'s [signatures], in
    /// locked mode or not.
    pub fn settle(
        signed_by: Option<&Signer>,
        pull: &PullSection,
        manifest_dir: &Path,
        ceiling: Option<&SignatureCeiling>,
        locked: bool,
    ) -> Result<Self> {
        let signed_by = signed_by
            .map(|signer| match signer {
                Signer::Key(path) => Signer::Key(manifest_dir.join(path)),
                identity @ Signer::Identity(_) => identity.clone(),
            })
            .map(Accepted::read)
            .transpose()?;
        let listed = ceiling
            .map(|ceiling| {
                ceiling
                    .signers
                    .iter()
                    .cloned()
                    .map(Accepted::read)
                    .collect()
            })
            .transpose()?
            .unwrap_or_else(Vec::new);
        if locked && listed.is_empty() {
            bail!(
                "locked mode requires the ceiling's [signatures] to list who may sign \
                 remote components"
            );
        }
        let signers = match signed_by {
            None if listed.is_empty() => bail!(
                "a remote component must be signed: name its signer with `signed_by` (a cosign \
                 public key, or {{ identity, issuer }})"
            ),
            None => listed,
            Some(signer) if listed.is_empty() => vec![signer],
            Some(signer) => match listed.into_iter().find(|listed| listed.same_as(&signer)) {
                // The ceiling's copy of a key is the one checked.
                Some(listed) => vec![listed],
                None => bail!(
                    "signed_by names {signer}, which the ceiling's [signatures] does \
                     not list"
                ),
            },
        };
        let Some(ceiling) = ceiling else {
            let mib = pull.max_component_mib.unwrap_or(DEFAULT_MAX_COMPONENT_MIB);
            return Ok(Self {
                signers,
                fulcio_roots: read_pem(pull.fulcio_roots.as_deref(), manifest_dir, "CERTIFICATE")?,
                rekor_keys: read_pem(pull.rekor_keys.as_deref(), manifest_dir, "PUBLIC KEY")?,
                require_log_entry: pull.require_log_entry,
                max_component_bytes: mib.saturating_mul(1024 * 1024),
            });
        };
        if pull.fulcio_roots.is_some() || pull.rekor_keys.is_some() {
            bail!(
                "the ceiling's [signatures] sets the trust root; remove fulcio_roots and \
                 rekor_keys from [pull]"
            );
        }
        if ceiling.require_log_entry == Some(true) && !pull.require_log_entry {
            bail!(
                "the ceiling requires a transparency-log entry on every signature; \
                 remove require_log_entry = false"
            );
        }
        let mib = match (pull.max_component_mib, ceiling.max_component_mib) {
            (Some(mib), Some(most)) if mib > most => {
                bail!("[pull] max_component_mib = {mib} exceeds the operator's ceiling of {most}")
            }
            (Some(mib), _) => mib,
            (None, Some(most)) => most.min(DEFAULT_MAX_COMPONENT_MIB),
            (None, None) => DEFAULT_MAX_COMPONENT_MIB,
        };
        Ok(Self {
            signers,
            fulcio_roots: read_pem(
                ceiling.fulcio_roots.as_deref(),
                Path::new(""),
                "CERTIFICATE",
            )?,
            rekor_keys: read_pem(ceiling.rekor_keys.as_deref(), Path::new(""), "PUBLIC KEY")?,
            require_log_entry: pull.require_log_entry,
            max_component_bytes: mib.saturating_mul(1024 * 1024),
        })
    }

    /// What vouches for certificates and log entries, in one digest: a
    /// component verified under another trust root is not taken on trust.
    pub fn trust_digest(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        for (label, blocks) in [("fulcio", &self.fulcio_roots), ("rekor", &self.rekor_keys)] {
            hasher.update(label.as_bytes());
            for block in blocks {
                hasher.update(&(block.len() as u64).to_le_bytes());
                hasher.update(block);
            }
        }
        hasher.finalize().to_hex().to_string()
    }
}

/// Every PEM block labelled `label` in the file at `path` (relative to
/// `base`), as DER; nothing when no file is named.
fn read_pem(path: Option<&Path>, base: &Path, label: &str) -> Result<Vec<Vec<u8>>> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let path = base.join(path);
    let text = crate::operator_file::read_text(&path, "the PEM file")?;
    let blocks = pem_blocks(&text, label)
        .with_context(|| format!("{} holds a damaged {label}", path.display()))?;
    if blocks.is_empty() {
        bail!("{} holds no {label} in PEM", path.display());
    }
    Ok(blocks)
}

/// Every PEM block labelled `label` in `text`, as DER.
fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>> {
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&begin) {
        let after = &rest[start + begin.len()..];
        let Some(stop) = after.find(&end) else {
            bail!("a {label} block has no end");
        };
        let body: String = after[..stop].split_whitespace().collect();
        blocks.push(base64::engine::general_purpose::STANDARD.decode(body)?);
        rest = &after[stop + end.len()..];
    }
    Ok(blocks)
}

/// The DER bytes of the PEM public key in the file at `path`.
fn key_der(path: &Path) -> Result<Vec<u8>> {
    let text = crate::operator_file::read_text(path, "public key")?;
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "{} is a private key; name its public half (the .pub file) instead",
            path.display()
        );
    }
    let mut blocks = pem_blocks(&text, "PUBLIC KEY")
        .with_context(|| format!("{} holds a damaged PEM public key", path.display()))?;
    if blocks.len() != 1 {
        bail!("{} must hold exactly one PEM public key", path.display());
    }
    Ok(blocks.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(identity: &str) -> Signer {
        Signer::Identity(Identity {
            identity: identity.into(),
            issuer: "https://idp.example.com".into(),
        })
    }

    fn settle(
        signed_by: Option<&Signer>,
        pull: &PullSection,
        dir: &Path,
        ceiling: Option<&SignatureCeiling>,
        locked: bool,
    ) -> String {
        match SignatureRules::settle(signed_by, pull, dir, ceiling, locked) {
            Ok(rules) => format!("{:?}", rules.signers),
            Err(error) => format!("{error:#}"),
        }
    }

    #[test]
    fn a_manifest_without_a_signer_is_refused_unless_the_ceiling_lists_some() {
        let pull = PullSection::default();
        let dir = Path::new(".");
        assert!(settle(None, &pull, dir, None, false).contains("signed_by"));
        let ceiling = SignatureCeiling {
            signers: vec![identity("a@example.com")],
            ..Default::default()
        };
        let rules = SignatureRules::settle(None, &pull, dir, Some(&ceiling), true).unwrap();
        assert_eq!(rules.signers.len(), 1);
        assert_eq!(
            rules.signers[0].to_string(),
            "identity a@example.com (issuer https://idp.example.com)"
        );
    }

    #[test]
    fn locked_mode_wants_the_ceiling_to_list_signers() {
        let signer = identity("a@example.com");
        let pull = PullSection::default();
        let dir = Path::new(".");
        assert!(settle(Some(&signer), &pull, dir, None, true).contains("locked mode"));
        let empty = SignatureCeiling::default();
        assert!(settle(Some(&signer), &pull, dir, Some(&empty), true).contains("locked mode"));
    }

    #[test]
    fn the_ceiling_caps_the_signer_the_trust_root_the_log_and_the_size() {
        let dir = Path::new(".");
        let ceiling = SignatureCeiling {
            signers: vec![identity("a@example.com")],
            require_log_entry: Some(true),
            max_component_mib: Some(8),
            ..Default::default()
        };
        let other = identity("b@example.com");
        let pull = PullSection::default();
        assert!(settle(Some(&other), &pull, dir, Some(&ceiling), false).contains("does not list"));
        let own_root = PullSection {
            fulcio_roots: Some("mine.pem".into()),
            ..Default::default()
        };
        assert!(settle(None, &own_root, dir, Some(&ceiling), false).contains("trust root"));
        let no_log = PullSection {
            require_log_entry: false,
            ..Default::default()
        };
        assert!(settle(None, &no_log, dir, Some(&ceiling), false).contains("transparency-log"));
        let big = PullSection {
            max_component_mib: Some(9),
            ..Default::default()
        };
        assert!(settle(None, &big, dir, Some(&ceiling), false).contains("ceiling of 8"));
        let unset = SignatureRules::settle(None, &pull, dir, Some(&ceiling), false).unwrap();
        assert_eq!(unset.max_component_bytes, 8 * 1024 * 1024);
        // A section that lists nobody still caps what manifests may set.
        let caps_only = SignatureCeiling {
            require_log_entry: Some(true),
            ..Default::default()
        };
        let signer = identity("a@example.com");
        assert!(
            settle(Some(&signer), &no_log, dir, Some(&caps_only), false)
                .contains("transparency-log")
        );
    }

    #[test]
    fn a_key_is_listed_by_its_bytes_and_the_ceilings_copy_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let key = "-----BEGIN PUBLIC KEY-----\nAAEC\nAwQ=\n-----END PUBLIC KEY-----\n";
        std::fs::write(dir.path().join("mine.pub"), key).unwrap();
        std::fs::write(dir.path().join("theirs.pub"), key.replace("AAEC", "AAED")).unwrap();
        std::fs::write(dir.path().join("copy.pub"), format!("# the team\n{key}")).unwrap();
        let ceiling = SignatureCeiling {
            signers: vec![Signer::Key(dir.path().join("copy.pub"))],
            ..Default::default()
        };
        let pull = PullSection::default();
        let mine = Signer::Key("mine.pub".into());
        let rules =
            SignatureRules::settle(Some(&mine), &pull, dir.path(), Some(&ceiling), false).unwrap();
        assert_eq!(
            rules.signers[0].to_string(),
            format!("key {}", dir.path().join("copy.pub").display())
        );
        let theirs = Signer::Key("theirs.pub".into());
        assert!(
            settle(Some(&theirs), &pull, dir.path(), Some(&ceiling), false)
                .contains("does not list")
        );
    }
}
