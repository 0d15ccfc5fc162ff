//! TLS settings for `rediss://` connections: which CA to trust, and the
//! client certificate and key for mutual TLS (rustls; no OpenSSL).
//! `TlsConfig` exists with or without the `tls` feature (a configuration
//! can name it either way); without it, connecting with one is an
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying so.

#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;

#[cfg(feature = "tls")]
use crate::error::Error;
use crate::error::Result;

/// The certificates of a TLS connection, as the `redis` crate takes them.
#[cfg(feature = "tls")]
pub(crate) type Certificates = redis::TlsCertificates;

/// Without the `tls` feature no certificates exist (`TlsConfig::certificates`
/// fails), so no value of this type does either.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(crate) enum Certificates {}

/// Certificates for TLS connections (`rediss://` URLs), given to
/// [`crate::ClientBuilder::tls`]. Without a CA, the system's trusted roots
/// are used; with a certificate and key, the client authenticates itself
/// (mutual TLS). Files are PEM.
///
/// Needs the `tls` feature (on by default) to connect: without it, a builder
/// given a `TlsConfig` fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
///
/// ```
/// let tls = dlm::TlsConfig::default()
///     .ca("/etc/redis/ca.crt")
///     .client_cert("/etc/redis/client.crt", "/etc/redis/client.key");
/// assert!(tls.has_client_cert());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl TlsConfig {
    /// Trust the server certificates this CA (PEM file) signed, instead of
    /// the system's roots.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// Present this certificate and private key (PEM files) to the server.
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// Whether a client certificate is configured.
    pub fn has_client_cert(&self) -> bool {
        self.cert.is_some()
    }

    /// The files read into the `redis` crate's form; a missing or unreadable
    /// file is an [`Error::InvalidArgument`] naming it.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Result<Certificates> {
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("TLS client certificate", cert)?,
                client_key: read("TLS client key", key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "TLS client certificate",
                    "a certificate needs its key and a key its certificate",
                ));
            }
        };
        let root_cert = match &self.ca {
            Some(ca) => Some(read("TLS CA certificate", ca)?),
            None => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }

    /// Without the `tls` feature there is nothing to read them into.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn certificates(&self) -> Result<Certificates> {
        Err(crate::error::Error::feature_disabled("TLS", "tls"))
    }
}

#[cfg(feature = "tls")]
fn read(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::invalid(what, format!("{}: {e}", path.display())))
}
