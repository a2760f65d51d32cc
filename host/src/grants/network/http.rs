//! Outgoing `wasi:http` requests: checked against the allowlist, resolved and
//! vetted by resmux, and sent over a connection resmux opens to the vetted
//! address itself, so a name cannot resolve to one address for the check and
//! another for the connection. Every request passes here, the follow-up of a
//! redirect included (WASI HTTP never follows redirects on its own).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error, RequestOptions, Result, WasiBody, WasiHttpHooks};

use super::{NetworkGrant, Protocol, is_public};

/// How long connecting may take when the plugin sets no timeout; the call's
/// own time limit bounds it in any case.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The web PKI roots that HTTPS servers are verified against.
static TLS: LazyLock<tokio_rustls::TlsConnector> = LazyLock::new(|| {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
});

/// The HTTP half of one plugin's network grant.
pub struct HttpPolicy {
    plugin: Arc<str>,
    grant: NetworkGrant,
}

impl HttpPolicy {
    pub fn new(plugin: Arc<str>, grant: NetworkGrant) -> Self {
        Self { plugin, grant }
    }
}

type SendResult = Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<()>> + Send>,
)>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _: Box<dyn Future<Output = Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let plugin = self.plugin.clone();
        let grant = self.grant.clone();
        Box::new(async move {
            let uri = request.uri().clone();
            let outcome = send(&grant, request, options).await;
            match &outcome {
                Err(Error::HttpRequestDenied) => tracing::warn!(
                    %plugin, %uri,
                    "denied an outgoing HTTP request: not on the plugin's network allowlist"
                ),
                Err(Error::DestinationIpProhibited) => tracing::warn!(
                    %plugin, %uri,
                    "denied an outgoing HTTP request: its host resolves only to addresses that are not public and that no entry names"
                ),
                Err(failure) => {
                    tracing::info!(%plugin, %uri, "outgoing HTTP request failed: {failure}")
                }
                Ok(_) => tracing::debug!(%plugin, %uri, "outgoing HTTP request sent"),
            }
            outcome
        })
    }
}

/// Where a request goes, taken from its URI.
struct Target {
    tls: bool,
    host: String,
    port: u16,
}

impl Target {
    fn of(uri: &http::Uri) -> Result<Self> {
        let protocol = match uri.scheme_str() {
            Some("http") => Protocol::Http,
            Some("https") => Protocol::Https,
            _ => return Err(Error::HttpProtocolError),
        };
        let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = protocol == Protocol::Https;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Self { tls, host, port })
    }

    fn protocol(&self) -> Protocol {
        if self.tls {
            Protocol::Https
        } else {
            Protocol::Http
        }
    }
}

async fn send(
    grant: &NetworkGrant,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> SendResult {
    let target = Target::of(request.uri())?;
    let address = vetted_address(grant, &target).await?;
    let connect_timeout = options
        .and_then(|options| options.connect_timeout)
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(address))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
            _ => Error::Connect(error),
        })?;
    let stream: Box<dyn Stream> = if target.tls {
        let name = match target.host.parse::<IpAddr>() {
            Ok(ip) => ServerName::from(ip),
            Err(_) => ServerName::try_from(target.host.clone())
                .map_err(|_| Error::HttpRequestUriInvalid)?,
        };
        Box::new(TLS.connect(name, stream).await.map_err(Error::Tls)?)
    } else {
        Box::new(stream)
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::from)?;
    let connection = tokio::spawn(connection);
    // The request line carries only the path: the authority went into `Host`.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .parse()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    *request.uri_mut() = path;
    let response = sender.send_request(request).await.map_err(Error::from)?;
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    let finished: Box<dyn Future<Output = Result<()>> + Send> = Box::new(async move {
        match connection.await {
            Ok(outcome) => outcome.map_err(Error::from),
            Err(_) => Err(Error::ConnectionTerminated),
        }
    });
    Ok((response, finished))
}

/// The address to connect to: the request must be on the allowlist, and of
/// the addresses its host resolves to, the first public one is taken, or a
/// private one that a matching entry names itself.
async fn vetted_address(grant: &NetworkGrant, target: &Target) -> Result<SocketAddr> {
    let entries: Vec<_> = grant
        .entries()
        .iter()
        .filter(|entry| entry.matches(target.protocol(), &target.host, target.port))
        .collect();
    if entries.is_empty() {
        return Err(Error::HttpRequestDenied);
    }
    let addresses: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, target.port)],
        Err(_) => grant
            .resolver()
            .resolve(&target.host, target.port)
            .await
            .map_err(|error| Error::DnsError {
                rcode: Some(error.to_string()),
                info_code: None,
            })?,
    };
    addresses
        .into_iter()
        .find(|address| {
            let ip = address.ip();
            is_public(ip) || entries.iter().any(|entry| entry.names_address(ip))
        })
        .ok_or(Error::DestinationIpProhibited)
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}
