//! Components pulled from an OCI registry instead of read from the plugin
//! folder: a manifest's `oci = "registry/repository:tag[@sha256:…]"`.
//!
//! A pull resolves the reference to a manifest digest, refuses anything
//! that is not one Wasm component as the Bytecode Alliance tooling
//! publishes it ([`artifact`]), checks the cosign signature of that digest
//! against the signers the manifest and the ceiling accept
//! ([`signature`]), and only then downloads the component, by digest and
//! within its size limit, into the [`store`]. Nothing of a component is
//! compiled, or taken from the compile cache, before its signature passed.
//! A registry that cannot be reached is not fatal: the last component this
//! host verified for the reference serves on, if its signer is still
//! accepted. [`publish`] is the other direction, for `resmux push`.

mod artifact;
mod manifest_read;
pub mod publish;
mod signature;
mod store;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

pub use store::Store;

use crate::grants::signers::SignatureRules;

/// The longest a registry may take to answer one pull before it counts as
/// unreachable.
const REGISTRY_PATIENCE: Duration = Duration::from_secs(60);

/// The longest one look-up of a tag may take: the live folder waits for it.
const LOOKUP_PATIENCE: Duration = Duration::from_secs(15);

/// How resmux reaches registries.
#[derive(Debug, Clone, Default)]
pub struct Registries {
    /// Registries (`host:port`) spoken to over plain HTTP; loopback ones
    /// always are, as Docker does.
    pub plain_http: Vec<String>,
}

/// The environment variable that may hold registry credentials, in the
/// format of Docker's `config.json`.
pub const AUTH_VARIABLE: &str = "RESMUX_REGISTRY_AUTH";

impl Registries {
    /// The registries that `registry`'s clients speak plain HTTP to: those
    /// the operator listed, and `registry` itself if it is loopback.
    fn plain_http_for(&self, registry: &str) -> Vec<String> {
        let mut plain = self.plain_http.clone();
        if is_loopback(registry) {
            plain.push(registry.to_owned());
        }
        plain
    }

    /// The configuration of sigstore's own client for `registry`.
    fn sigstore_config(&self, registry: &str) -> sigstore::registry::ClientConfig {
        sigstore::registry::ClientConfig {
            protocol: sigstore::registry::ClientProtocol::HttpsExcept(
                self.plain_http_for(registry),
            ),
            ..Default::default()
        }
    }

    /// A client for `reference`'s registry.
    fn client(&self, reference: &Reference) -> Result<Client> {
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(
                self.plain_http_for(reference.resolve_registry()),
            ),
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            user_agent: concat!("resmux/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        Client::try_from(config).context("cannot set up a registry client")
    }

    /// The credentials for `registry`: from [`AUTH_VARIABLE`], else from
    /// Docker's config file (`$DOCKER_CONFIG/config.json` or
    /// `~/.docker/config.json`) and its credential helpers; anonymous when
    /// neither names the registry. A helper is a process of its own: it
    /// runs off the threads that serve, and has [`HELPER_PATIENCE`].
    async fn auth(&self, registry: &str) -> Result<RegistryAuth> {
        let registry = registry.to_owned();
        let lookup = tokio::task::spawn_blocking(move || credentials(&registry));
        tokio::time::timeout(HELPER_PATIENCE, lookup)
            .await
            .map_err(|_| {
                anyhow!(
                    "the credential helper named in Docker's config did not answer within {} s",
                    HELPER_PATIENCE.as_secs()
                )
            })?
            .context("looking up registry credentials")?
    }
}

/// The longest a credential helper may take.
const HELPER_PATIENCE: Duration = Duration::from_secs(10);

/// See [`Registries::auth`].
fn credentials(registry: &str) -> Result<RegistryAuth> {
    use docker_credential::{CredentialRetrievalError as Missing, DockerCredential};
    let found = match std::env::var(AUTH_VARIABLE) {
        Ok(config) => {
            serde_json::from_str::<serde_json::Value>(&config).map_err(|error| {
                anyhow!("{AUTH_VARIABLE} is not the JSON of a Docker config.json: {error}")
            })?;
            docker_credential::get_credential_from_reader(config.as_bytes(), registry)
        }
        Err(_) => docker_credential::get_credential(registry),
    };
    match found {
        Ok(DockerCredential::UsernamePassword(user, password)) => {
            Ok(RegistryAuth::Basic(user, password))
        }
        Ok(DockerCredential::IdentityToken(_)) => bail!(
            "the credentials for {registry} are an identity token, which resmux cannot use; \
             give a user name and password (or a registry token as the password)"
        ),
        Err(
            Missing::NoCredentialConfigured | Missing::ConfigNotFound | Missing::ConfigReadError,
        ) => Ok(RegistryAuth::Anonymous),
        Err(error) => Err(anyhow!(
            "cannot read the credentials for {registry}: {error}"
        )),
    }
}

/// Whether `registry` (`host[:port]`) is on the loopback interface.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => registry.split(':').next().unwrap_or_default(),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// A component a manifest names by its registry reference.
#[derive(Debug, Clone)]
pub struct Remote {
    reference: Reference,
    /// The reference as the manifest wrote it.
    named: String,
}

impl Remote {
    /// Parses the manifest's `oci` reference.
    pub fn parse(named: &str) -> Result<Self> {
        let reference: Reference = named
            .parse()
            .map_err(|error| anyhow!("oci = {named:?} is not a registry reference: {error}"))?;
        if let Some(digest) = reference.digest()
            && !digest.starts_with("sha256:")
        {
            bail!("oci = {named:?} pins a {digest} digest; resmux checks sha256 digests only");
        }
        Ok(Self {
            reference,
            named: named.to_owned(),
        })
    }

    /// Whether the reference names a tag without pinning a digest, so that
    /// what it names can move.
    pub fn moves(&self) -> bool {
        self.reference.digest().is_none()
    }
}

impl std::fmt::Display for Remote {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.named)
    }
}

/// A verified component, ready in the store.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// Its bytes, in the store.
    pub component: PathBuf,
    /// The SHA-256 of its bytes, in hex.
    pub component_sha256: String,
    pub provenance: Provenance,
}

/// Where a pulled component came from and who vouched for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The reference the manifest names.
    pub reference: String,
    /// The digest of the OCI manifest it resolved to.
    pub manifest_digest: String,
    /// The signer whose signature passed.
    pub signed_by: String,
    /// Whether that signature has a checked transparency-log entry.
    pub logged: bool,
}

/// Pulls and verifies `remote` under `rules` (see the module's doc). When
/// the registry cannot be reached, the component last verified here for the
/// same reference serves, if its signer is still accepted.
pub async fn pull(
    remote: &Remote,
    rules: &SignatureRules,
    registries: &Registries,
    store: &Store,
) -> Result<Pulled> {
    let online = tokio::time::timeout(
        REGISTRY_PATIENCE,
        pull_online(remote, rules, registries, store),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Pulling::Unreachable(anyhow!(
            "the registry did not answer within {} s",
            REGISTRY_PATIENCE.as_secs()
        )))
    });
    match online {
        Ok(pulled) => Ok(pulled),
        Err(Pulling::Refused(error)) => Err(error.context(format!("oci {remote} refused"))),
        Err(Pulling::Unreachable(error)) => match verified_before(store, remote, rules).await? {
            Some(pulled) => {
                tracing::warn!(
                    reference = remote.named,
                    digest = pulled.provenance.manifest_digest,
                    "registry unreachable ({error:#}); serving the component verified here before"
                );
                Ok(pulled)
            }
            None => Err(error.context(format!(
                "cannot pull oci {remote}, and no copy verified here before is in the cache"
            ))),
        },
    }
}

/// [`Store::verified`], off the threads that serve: it hashes the component.
async fn verified_before(
    store: &Store,
    remote: &Remote,
    rules: &SignatureRules,
) -> Result<Option<Pulled>> {
    let (store, named, rules) = (store.clone(), remote.named.clone(), rules.clone());
    tokio::task::spawn_blocking(move || store.verified(&named, &rules)).await?
}

/// Why a pull did not give a component: the registry could not be asked,
/// or it answered with something to refuse.
enum Pulling {
    Unreachable(anyhow::Error),
    Refused(anyhow::Error),
}

impl From<anyhow::Error> for Pulling {
    fn from(error: anyhow::Error) -> Self {
        Self::Refused(error)
    }
}

/// The digest `remote`'s tag names now, from one `HEAD` request.
pub async fn current_digest(remote: &Remote, registries: &Registries) -> Result<String> {
    let client = registries.client(&remote.reference)?;
    let auth = registries.auth(remote.reference.resolve_registry()).await?;
    let digest = tokio::time::timeout(
        LOOKUP_PATIENCE,
        client.fetch_manifest_digest(&remote.reference, &auth),
    )
    .await
    .map_err(|_| {
        anyhow!(
            "the registry did not answer a look-up of oci {remote} within {} s",
            LOOKUP_PATIENCE.as_secs()
        )
    })?
    .with_context(|| format!("cannot look up oci {remote}"))?;
    Ok(digest)
}

async fn pull_online(
    remote: &Remote,
    rules: &SignatureRules,
    registries: &Registries,
    store: &Store,
) -> Result<Pulled, Pulling> {
    let reference = &remote.reference;
    let client = registries.client(reference)?;
    let auth = registries.auth(reference.resolve_registry()).await?;
    let found = artifact::resolve(
        &client,
        &auth,
        reference,
        registries,
        rules.max_component_bytes,
    )
    .await?;
    let digested = Reference::with_digest(
        reference.registry().to_owned(),
        reference.repository().to_owned(),
        found.manifest_digest.clone(),
    );
    let signed = signature::verify(&client, &auth, &digested, registries, rules).await?;
    let component_sha256 = found.component_sha256()?;
    // Hashing and writing up to the size limit happen off the threads that
    // serve.
    let (kept, sha256) = (store.clone(), component_sha256.clone());
    let stored = tokio::task::spawn_blocking(move || kept.component(&sha256))
        .await
        .context("looking in the store")?;
    let component = match stored {
        Some(path) => path,
        None => {
            let bytes =
                artifact::download(&client, &digested, &found.layer, rules.max_component_bytes)
                    .await?;
            let (kept, sha256) = (store.clone(), component_sha256.clone());
            tokio::task::spawn_blocking(move || kept.keep_component(&sha256, &bytes))
                .await
                .context("storing the component")??
        }
    };
    let provenance = Provenance {
        reference: remote.named.clone(),
        manifest_digest: found.manifest_digest,
        signed_by: signed.by.to_string(),
        logged: signed.logged,
    };
    store.record(&provenance, &signed.by, rules, &component_sha256)?;
    tracing::info!(
        reference = remote.named,
        digest = provenance.manifest_digest,
        signed_by = provenance.signed_by,
        "component pulled and verified"
    );
    Ok(Pulled {
        component,
        component_sha256,
        provenance,
    })
}

/// `auth` for sigstore's registry client.
fn sigstore_auth(auth: &RegistryAuth) -> sigstore::registry::Auth {
    use sigstore::registry::Auth;
    match auth {
        RegistryAuth::Anonymous => Auth::Anonymous,
        RegistryAuth::Basic(user, password) => Auth::Basic(user.clone(), password.clone()),
        RegistryAuth::Bearer(token) => Auth::Bearer(token.clone()),
    }
}

/// Whether `error` means the registry could not be asked at all (no
/// connection, a timeout, a server error), rather than that it answered.
fn unreachable(error: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as Oci;
    match error {
        Oci::RequestError(_) | Oci::IoError(_) => true,
        Oci::ServerError { code, .. } => *code >= 500 || *code == 429,
        Oci::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|error| error.code == oci_client::errors::OciErrorCode::Toomanyrequests),
        _ => false,
    }
}

/// Whether `error` is the registry refusing the credentials it was given
/// (or asking for some).
fn unauthorized(error: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as Oci;
    match error {
        Oci::UnauthorizedError { .. } | Oci::AuthenticationFailure(_) => true,
        Oci::ServerError { code, .. } => matches!(code, 401 | 403),
        Oci::RegistryError { envelope, .. } => envelope.errors.iter().any(|error| {
            matches!(
                error.code,
                oci_client::errors::OciErrorCode::Unauthorized
                    | oci_client::errors::OciErrorCode::Denied
            )
        }),
        _ => false,
    }
}

/// `error` of the registry client, with `what` was being done, and what
/// to do about credentials when the registry refused them.
fn explained(error: oci_client::errors::OciDistributionError, what: String) -> anyhow::Error {
    if unauthorized(&error) {
        anyhow!(
            "{what}: the registry wants credentials resmux does not have, or refused those it \
             has; give them in {AUTH_VARIABLE} or Docker's config.json ({error})"
        )
    } else {
        anyhow::Error::new(error).context(what)
    }
}

/// Sorts an error of reading a manifest into [`Pulling`], with `what` was
/// being done.
fn sorted_manifest(error: manifest_read::ManifestError, what: String) -> Pulling {
    match error {
        manifest_read::ManifestError::Registry(error) => sorted(error, what),
        manifest_read::ManifestError::Refused(error) => Pulling::Refused(error.context(what)),
    }
}

/// Sorts an error of the registry client into [`Pulling`], with `what`
/// was being done.
fn sorted(error: oci_client::errors::OciDistributionError, what: String) -> Pulling {
    let unreachable = unreachable(&error);
    let error = explained(error, what);
    if unreachable {
        Pulling::Unreachable(error)
    } else {
        Pulling::Refused(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_plain_http() {
        for registry in [
            "127.0.0.1:5000",
            "localhost:5000",
            "[::1]:5000",
            "127.0.0.2",
        ] {
            assert!(is_loopback(registry), "{registry}");
        }
        for registry in [
            "registry.example.com",
            "10.0.0.1:5000",
            "localhost.example.com",
        ] {
            assert!(!is_loopback(registry), "{registry}");
        }
    }

    #[test]
    fn only_sha256_pins_are_taken() {
        let pinned = format!("127.0.0.1:5000/team/x:1@sha256:{}", "a".repeat(64));
        assert!(!Remote::parse(&pinned).unwrap().moves());
        assert!(Remote::parse("127.0.0.1:5000/team/x:1").unwrap().moves());
        let other = format!("127.0.0.1:5000/team/x@sha512:{}", "a".repeat(128));
        let error = Remote::parse(&other).unwrap_err();
        assert!(format!("{error}").contains("sha256"), "{error}");
    }
}
