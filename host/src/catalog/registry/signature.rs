//! Checking a component's cosign signatures, where cosign stores them (the
//! `sha256-<hex>.sig` tag beside the component, and OCI referrers), with
//! the `sigstore` crate, before any byte of the component is downloaded.
//!
//! A signature passes for one of the accepted signers when:
//! - it signs the exact manifest digest resolved (sigstore checks the
//!   payload);
//! - a key signer's key verifies it; or, for a keyless signer, its
//!   certificate chains to the operator's Fulcio roots, names the identity
//!   and issuer exactly, and its key verifies it (sigstore 0.15 does not
//!   check that last part itself);
//! - its transparency-log entry, if it carries one, verifies against the
//!   operator's Rekor keys and is the entry of this very signature; and it
//!   carries one unless `require_log_entry = false` accepts a keyed
//!   signature without (an air-gapped signer's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, anyhow};
use base64::Engine as _;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use sigstore::cosign::bundle_content::BundleContent;
use sigstore::cosign::signature_layers::CertificateSubject;
use sigstore::cosign::{ClientBuilder, CosignCapabilities, SignatureLayer};
use sigstore::crypto::{CosignVerificationKey, Signature};
use sigstore::registry::OciReference;
use sigstore::trust::ManualTrustRoot;

use super::manifest_read::{ManifestError, pull_manifest};
use super::{Pulling, Registries, sigstore_auth, sorted_manifest};
use crate::grants::signers::{Accepted, Identity, SignatureRules};

/// The media type of a cosign signature layer.
pub const SIGNATURE_LAYER_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// The media type of the config of cosign's signature manifest.
pub const SIGNATURE_CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// The annotation that carries a signature (base64).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The annotation that carries a signature's transparency-log bundle.
const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// The most signatures one component may carry, and the largest one: a
/// registry cannot make resmux read more than that to check it.
const MOST_SIGNATURES: usize = 32;
const LARGEST_SIGNATURE: i64 = 64 * 1024;

/// A signature that passed, and for whom.
#[derive(Debug)]
pub struct Signed {
    pub by: Accepted,
    /// Whether it has a checked transparency-log entry.
    pub logged: bool,
}

/// Checks the signatures of `digested` (a digest reference) against
/// `rules`; see the module's doc.
pub async fn verify(
    client: &Client,
    auth: &RegistryAuth,
    digested: &Reference,
    registries: &Registries,
    rules: &SignatureRules,
) -> Result<Signed, Pulling> {
    let digest = digested.digest().unwrap_or_default();
    let bundled = stored_signatures(client, auth, digested, registries).await?;
    let root = trust_root(rules);
    let builder = ClientBuilder::default()
        .with_oci_client_config(registries.sigstore_config(digested.resolve_registry()))
        .with_trust_repository(&root)
        .map_err(|error| anyhow!("cannot use the trust root: {error}"))?;
    let mut cosign = builder
        .build()
        .map_err(|error| anyhow!("cannot set up signature checks: {error}"))?;
    let image: OciReference = digested
        .whole()
        .parse()
        .map_err(|error| anyhow!("cannot name {digest} for sigstore: {error}"))?;
    let layers = cosign
        .trusted_signature_layers(&sigstore_auth(auth), &image)
        .await
        .map_err(|error| anyhow!("cannot read its signatures: {error}"))?;
    let keys = rules
        .signers
        .iter()
        .filter_map(|signer| match signer {
            Accepted::Key { path, der } => Some(
                CosignVerificationKey::try_from_der(der)
                    .map(|key| (path.as_path(), key))
                    .map_err(|error| {
                        anyhow!("{} is not a key cosign signs with: {error}", path.display())
                    }),
            ),
            Accepted::Identity(_) => None,
        })
        .collect::<Result<BTreeMap<&Path, CosignVerificationKey>>>()?;
    let mut reasons = Vec::new();
    for layer in &layers {
        if layer.simple_signing.critical.image.docker_manifest_digest != digest {
            reasons.push("one signs another digest".to_owned());
            continue;
        }
        for signer in &rules.signers {
            match judge(layer, signer, &keys, &bundled, rules.require_log_entry) {
                Ok(logged) => {
                    return Ok(Signed {
                        by: signer.clone(),
                        logged,
                    });
                }
                Err(reason) => reasons.push(reason),
            }
        }
    }
    let accepted: Vec<String> = rules.signers.iter().map(Accepted::to_string).collect();
    let accepted = accepted.join(" or ");
    let tag = format!("{}:{}", digested.repository(), signature_tag(digest));
    if layers.is_empty() && bundled.stored > 0 {
        return Err(Pulling::Refused(anyhow!(
            "{digest} has no signature that passes sigstore's own checks: the {} stored at \
             {tag} sign another digest or carry a log entry that does not verify against \
             rekor_keys; it must be signed by {accepted}",
            bundled.stored
        )));
    }
    if layers.is_empty() {
        return Err(Pulling::Refused(anyhow!(
            "{digest} is not signed: no cosign signature for it is stored at {tag}; it must be \
             signed by {accepted}"
        )));
    }
    reasons.sort();
    reasons.dedup();
    Err(Pulling::Refused(anyhow!(
        "none of the {} signature(s) of {digest} passes for {accepted}: {}",
        layers.len(),
        reasons.join("; ")
    )))
}

/// The tag cosign stores a digest's signatures under.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// What the signature manifest beside a component holds, checked for size
/// before sigstore reads it.
#[derive(Default)]
struct Stored {
    /// How many signature layers it has.
    stored: usize,
    /// The digests of the layers that carry a transparency-log bundle.
    with_bundle: BTreeSet<String>,
}

impl Stored {
    fn has_bundle(&self, layer: &SignatureLayer) -> bool {
        self.with_bundle.contains(&layer.oci_digest)
    }
}

async fn stored_signatures(
    client: &Client,
    auth: &RegistryAuth,
    digested: &Reference,
    registries: &Registries,
) -> Result<Stored, Pulling> {
    let tag = signature_tag(digested.digest().unwrap_or_default());
    let signatures = Reference::with_tag(
        digested.registry().to_owned(),
        digested.repository().to_owned(),
        tag.clone(),
    );
    let accepted = [OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE];
    let body = match pull_manifest(client, auth, &signatures, &accepted, registries).await {
        Ok((body, _)) => body,
        Err(ManifestError::Registry(error)) if absent(&error) => return Ok(Stored::default()),
        Err(error) => {
            return Err(sorted_manifest(
                error,
                format!("cannot read its signatures at {tag}"),
            ));
        }
    };
    let manifest: OciImageManifest = serde_json::from_slice(&body).map_err(|error| {
        anyhow!("its signature manifest {tag} is not an image manifest: {error}")
    })?;
    if manifest.layers.len() > MOST_SIGNATURES {
        return Err(Pulling::Refused(anyhow!(
            "its signature manifest {tag} has {} layers, more than the {MOST_SIGNATURES} \
             resmux reads",
            manifest.layers.len()
        )));
    }
    let mut stored = Stored::default();
    for layer in &manifest.layers {
        if layer.size > LARGEST_SIGNATURE || layer.size < 0 {
            return Err(Pulling::Refused(anyhow!(
                "a signature in {tag} is {} bytes, more than the {LARGEST_SIGNATURE} resmux reads",
                layer.size
            )));
        }
        if layer.media_type == SIGNATURE_LAYER_TYPE {
            stored.stored += 1;
            let annotations = layer.annotations.as_ref();
            if annotations.is_some_and(|annotations| annotations.contains_key(BUNDLE_ANNOTATION)) {
                stored.with_bundle.insert(layer.digest.clone());
            }
        }
    }
    Ok(stored)
}

/// Whether `error` says that no such manifest is stored.
pub fn absent(error: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as Oci, OciErrorCode as Code};
    match error {
        Oci::ImageManifestNotFoundError(_) => true,
        Oci::ServerError { code, .. } => *code == 404,
        Oci::RegistryError { envelope, .. } => envelope.errors.iter().all(|error| {
            matches!(
                error.code,
                Code::ManifestUnknown | Code::NameUnknown | Code::NotFound
            )
        }),
        _ => false,
    }
}

/// Whether `layer` is a signature by `signer` that the log rules accept:
/// `Ok(logged)`, or why not.
fn judge(
    layer: &SignatureLayer,
    signer: &Accepted,
    keys: &BTreeMap<&Path, CosignVerificationKey>,
    stored: &Stored,
    require_log_entry: bool,
) -> Result<bool, String> {
    let signature = layer
        .signature
        .as_deref()
        .ok_or_else(|| "a signature layer without a signature".to_owned())?;
    let signed_with = |key: &CosignVerificationKey| {
        key.verify_signature(
            Signature::Base64Encoded(signature.as_bytes()),
            &layer.raw_data,
        )
        .is_ok()
    };
    match signer {
        Accepted::Key { path, .. } => {
            if !keys.get(path.as_path()).is_some_and(signed_with) {
                let by = match &layer.certificate_signature {
                    Some(certificate) => {
                        let (CertificateSubject::Email(subject) | CertificateSubject::Uri(subject)) =
                            &certificate.subject;
                        format!(" (it names identity {subject})")
                    }
                    None => " (it is made with another key)".to_owned(),
                };
                return Err(format!("one is not signed by key {}{by}", path.display()));
            }
        }
        Accepted::Identity(Identity { identity, issuer }) => {
            let Some(certificate) = &layer.certificate_signature else {
                return Err(
                    "one carries no certificate that chains to fulcio_roots with a \
                            checked log entry"
                        .to_owned(),
                );
            };
            let (CertificateSubject::Email(subject) | CertificateSubject::Uri(subject)) =
                &certificate.subject;
            let certified_issuer = certificate.issuer.as_deref().unwrap_or("none");
            if subject != identity || certified_issuer != issuer {
                return Err(format!(
                    "one is signed by identity {subject} (issuer {certified_issuer})"
                ));
            }
            if !signed_with(&certificate.verification_key) {
                return Err(format!(
                    "one names identity {subject} but was not made with its certificate's key"
                ));
            }
        }
    }
    match &layer.bundle {
        Some(BundleContent::RekorBundle(bundle)) => {
            logged_entry_is_this_one(&bundle.payload.body, signature, &layer.raw_data)?;
            Ok(true)
        }
        Some(BundleContent::SigstoreBundle(_)) => Ok(true),
        None if stored.has_bundle(layer) => Err(
            "one carries a transparency-log entry that cannot be checked: give rekor_keys".into(),
        ),
        None if require_log_entry => Err(format!(
            "one by {signer} has no transparency-log entry (set require_log_entry = false in \
             [pull] to accept an air-gapped signer's)"
        )),
        None => Ok(false),
    }
}

/// Checks that the Rekor entry `body` (base64 of a `hashedrekord`) records
/// `signature` over `payload`: its signature SET was checked by sigstore,
/// but not that it is the entry of this signature.
fn logged_entry_is_this_one(body: &str, signature: &str, payload: &[u8]) -> Result<(), String> {
    let not_this = |why: &str| format!("one has a transparency-log entry {why}");
    let body = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| not_this("whose body is not base64"))?;
    let entry: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| not_this("whose body is not JSON"))?;
    if entry["kind"] != "hashedrekord" {
        return Err(not_this(&format!(
            "of kind {}, which resmux does not check",
            entry["kind"]
        )));
    }
    let spec = &entry["spec"];
    let hashed = hex::encode(Sha256::digest(payload));
    if spec["data"]["hash"]["algorithm"] != "sha256" || spec["data"]["hash"]["value"] != hashed {
        return Err(not_this("for another payload"));
    }
    let decode = |text: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
    };
    let logged = spec["signature"]["content"].as_str().and_then(decode);
    if logged.is_none() || logged != decode(signature) {
        return Err(not_this("for another signature"));
    }
    Ok(())
}

/// The operator's Fulcio roots and Rekor keys, as sigstore takes them.
fn trust_root(rules: &SignatureRules) -> ManualTrustRoot<'_> {
    ManualTrustRoot {
        fulcio_certs: rules
            .fulcio_roots
            .iter()
            .map(|der| CertificateDer::from(der.as_slice()))
            .collect(),
        rekor_keys: rules
            .rekor_keys
            .iter()
            .map(|der| (hex::encode(Sha256::digest(der)), der.clone()))
            .collect(),
        ctfe_keys: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, hash: &str, signature: &str) -> String {
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": kind,
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hash}},
                "signature": {"content": signature, "publicKey": {"content": "a2V5"}},
            },
        });
        base64::engine::general_purpose::STANDARD.encode(body.to_string())
    }

    #[test]
    fn a_log_entry_must_record_this_signature_over_this_payload() {
        let payload = b"payload";
        let hash = hex::encode(Sha256::digest(payload));
        assert!(
            logged_entry_is_this_one(&entry("hashedrekord", &hash, "c2ln"), "c2ln", payload)
                .is_ok()
        );
        let other_signature =
            logged_entry_is_this_one(&entry("hashedrekord", &hash, "b3RoZXI="), "c2ln", payload);
        assert!(other_signature.unwrap_err().contains("another signature"));
        let other_payload = logged_entry_is_this_one(
            &entry("hashedrekord", &"0".repeat(64), "c2ln"),
            "c2ln",
            payload,
        );
        assert!(other_payload.unwrap_err().contains("another payload"));
        let rekord = logged_entry_is_this_one(&entry("rekord", &hash, "c2ln"), "c2ln", payload);
        assert!(rekord.unwrap_err().contains("does not check"));
    }
}
