//! Throwaway certificates for TLS servers: a CA, a server and a client
//! certificate it signed, and an unrelated CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Error;

/// PEM files for TLS tests, generated in a temporary directory that lives as
/// long as any clone of this value (servers started with them keep a clone).
///
/// * `ca_cert` signed `server_cert` (SANs `127.0.0.1` and `localhost`) and
///   `client_cert`; both are usable for server and client authentication, as
///   Redis also presents its server certificate when it connects to a master
///   or to another cluster node.
/// * `other_ca_cert` is an unrelated CA, for "unknown CA" tests.
/// * Keys are PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, ECDSA P-256).
///
/// A `rediss://` client of a server started with
/// [`ServerBuilder::tls`](crate::ServerBuilder::tls) must trust `ca_cert`, and
/// present `client_cert`/`client_key` when client certificates are required.
///
/// ```no_run
/// let tls = dlm_testkit::TlsFiles::generate()?;
/// let server = dlm_testkit::RedisServer::builder().tls(&tls, true).start()?;
/// assert!(server.url().starts_with("rediss://"));
/// println!("trust {} and present {}", tls.ca_cert.display(), tls.client_cert.display());
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA certificate that signed the server and client certificates.
    pub ca_cert: PathBuf,
    /// The server certificate, for `127.0.0.1` and `localhost`.
    pub server_cert: PathBuf,
    /// The server certificate's private key.
    pub server_key: PathBuf,
    /// A client certificate signed by `ca_cert`.
    pub client_cert: PathBuf,
    /// The client certificate's private key.
    pub client_key: PathBuf,
    /// A second, unrelated CA certificate: trusting only it must fail.
    pub other_ca_cert: PathBuf,
    dir: Arc<tempfile::TempDir>,
    client_config: Arc<rustls::ClientConfig>,
}

impl TlsFiles {
    /// Generate the CAs, certificates and keys and write them as PEM files.
    ///
    /// ```no_run
    /// let tls = dlm_testkit::TlsFiles::generate()?;
    /// assert!(tls.ca_cert.exists());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn generate() -> Result<TlsFiles, Error> {
        let dir = tempfile::Builder::new().prefix("dlm-tls-").tempdir()?;
        let path = |name: &str| dir.path().join(name);

        let ca_key = KeyPair::generate().map_err(tls_err)?;
        let ca = ca_params("dlm-testkit CA")?;
        let ca_cert = ca.self_signed(&ca_key).map_err(tls_err)?;
        let ca = Issuer::new(ca, ca_key);

        let server_key = KeyPair::generate().map_err(tls_err)?;
        let server_cert = leaf_params("dlm-testkit server", &["127.0.0.1", "localhost"])?
            .signed_by(&server_key, &ca)
            .map_err(tls_err)?;

        let client_key = KeyPair::generate().map_err(tls_err)?;
        let client_cert = leaf_params("dlm-testkit client", &[])?
            .signed_by(&client_key, &ca)
            .map_err(tls_err)?;

        let other_key = KeyPair::generate().map_err(tls_err)?;
        let other_cert = ca_params("dlm-testkit other CA")?
            .self_signed(&other_key)
            .map_err(tls_err)?;

        let files = [
            ("ca.crt", ca_cert.pem()),
            ("server.crt", server_cert.pem()),
            ("server.key", server_key.serialize_pem()),
            ("client.crt", client_cert.pem()),
            ("client.key", client_key.serialize_pem()),
            ("other-ca.crt", other_cert.pem()),
        ];
        for (name, pem) in &files {
            std::fs::write(path(name), pem)?;
        }

        let client_config = client_config(
            ca_cert.der().clone(),
            client_cert.der().clone(),
            PrivatePkcs8KeyDer::from(client_key.serialize_der()).into(),
        )?;
        Ok(TlsFiles {
            ca_cert: path("ca.crt"),
            server_cert: path("server.crt"),
            server_key: path("server.key"),
            client_cert: path("client.crt"),
            client_key: path("client.key"),
            other_ca_cert: path("other-ca.crt"),
            dir: Arc::new(dir),
            client_config,
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `redis-cli` arguments to reach a server started with these files:
    /// `--tls --cacert CA --cert CLIENT --key CLIENT_KEY`.
    ///
    /// ```no_run
    /// let tls = dlm_testkit::TlsFiles::generate()?;
    /// let server = dlm_testkit::RedisServer::builder().tls(&tls, true).start()?;
    /// let out = std::process::Command::new("redis-cli")
    ///     .args(tls.redis_cli_args())
    ///     .args(["-p", &server.port().to_string(), "PING"])
    ///     .output()?;
    /// assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn redis_cli_args(&self) -> Vec<String> {
        [
            "--tls",
            "--cacert",
            &self.ca_cert.to_string_lossy(),
            "--cert",
            &self.client_cert.to_string_lossy(),
            "--key",
            &self.client_key.to_string_lossy(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// The `redis-server` arguments for a TLS-only server on `port`.
    pub(crate) fn server_args(&self, port: u16, require_client_cert: bool) -> Vec<String> {
        self.server_options(port, require_client_cert)
            .into_iter()
            .flat_map(|(name, value)| [format!("--{name}"), value])
            .collect()
    }

    /// The same options as [`TlsFiles::server_args`] as config file lines
    /// (`tls-port 41234`), for a sentinel, which reads its options from a file.
    /// With `tls-replication yes` a sentinel reaches the master and the
    /// replicas over TLS, and announces its TLS port to the other sentinels.
    pub(crate) fn config_lines(&self, port: u16, require_client_cert: bool) -> Vec<String> {
        self.server_options(port, require_client_cert)
            .into_iter()
            .map(|(name, value)| format!("{name} \"{value}\""))
            .collect()
    }

    /// Option names (without `--`) and values for a TLS-only server on `port`.
    fn server_options(&self, port: u16, require_client_cert: bool) -> Vec<(&'static str, String)> {
        let auth = if require_client_cert { "yes" } else { "no" };
        vec![
            ("port", "0".into()),
            ("tls-port", port.to_string()),
            ("tls-cert-file", self.server_cert.to_string_lossy().into()),
            ("tls-key-file", self.server_key.to_string_lossy().into()),
            ("tls-ca-cert-file", self.ca_cert.to_string_lossy().into()),
            ("tls-auth-clients", auth.into()),
            // With no plain port, a replica can only reach its master over TLS.
            ("tls-replication", "yes".into()),
        ]
    }

    /// A rustls client that trusts `ca_cert` and presents `client_cert`.
    pub(crate) fn client_config(&self) -> &Arc<rustls::ClientConfig> {
        &self.client_config
    }
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Tls(e.to_string())
}

fn ca_params(name: &str) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

fn leaf_params(name: &str, sans: &[&str]) -> Result<CertificateParams, Error> {
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).map_err(tls_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

fn client_config(
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(tls_err)?;
    // Name the provider: another crate in the build may enable aws-lc-rs too,
    // and then rustls cannot pick a default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![cert], key)
        .map_err(tls_err)?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// Run `redis-cli ARGS` (killed after 10 s) and return what it printed.
    fn redis_cli(args: &[String]) -> Result<String, Error> {
        let mut child = Command::new("redis-cli")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let started = Instant::now();
        while child.try_wait()?.is_none() {
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output()?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .trim()
        .to_string())
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn generates_pem_files() -> Result<(), Error> {
        let tls = TlsFiles::generate()?;
        for cert in [
            &tls.ca_cert,
            &tls.server_cert,
            &tls.client_cert,
            &tls.other_ca_cert,
        ] {
            let pem = std::fs::read_to_string(cert)?;
            assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        }
        for key in [&tls.server_key, &tls.client_key] {
            let pem = std::fs::read_to_string(key)?;
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        }
        assert_ne!(
            std::fs::read(&tls.ca_cert)?,
            std::fs::read(&tls.other_ca_cert)?
        );
        let dir = tls.dir().to_path_buf();
        let copy = tls.clone();
        drop(tls);
        assert!(dir.exists(), "a clone keeps the files");
        drop(copy);
        assert!(!dir.exists());
        Ok(())
    }

    #[test]
    fn tls_server_requires_a_client_certificate_from_its_ca() -> Result<(), Error> {
        if crate::skip_without(crate::Feature::Tls) {
            return Ok(());
        }
        let tls = TlsFiles::generate()?;
        let server = RedisServer::builder()
            .password("s3cret")
            .tls(&tls, true)
            .start()?;
        assert!(server.is_tls());
        let port = server.port().to_string();
        assert_eq!(server.url(), format!("rediss://:s3cret@127.0.0.1:{port}/"));
        assert_eq!(server.command(&["SET", "k", "v"])?, "+OK");
        assert_eq!(server.command(&["GET", "k"])?, "v");

        let ca = tls.ca_cert.to_string_lossy().into_owned();
        let ping = args(&["--no-auth-warning", "-a", "s3cret", "-p", &port, "PING"]);
        let with_cert = [tls.redis_cli_args(), ping.clone()].concat();
        assert_eq!(redis_cli(&with_cert)?, "PONG");

        let without_cert = [args(&["--tls", "--cacert", &ca]), ping.clone()].concat();
        assert_ne!(redis_cli(&without_cert)?, "PONG");

        let mut unknown_ca = tls.redis_cli_args();
        unknown_ca[2] = tls.other_ca_cert.to_string_lossy().into_owned();
        assert_ne!(redis_cli(&[unknown_ca, ping.clone()].concat())?, "PONG");

        assert_ne!(redis_cli(&ping)?, "PONG", "plain text on the TLS port");
        Ok(())
    }

    #[test]
    fn tls_server_without_client_auth_takes_any_client_trusting_the_ca() -> Result<(), Error> {
        if crate::skip_without(crate::Feature::Tls) {
            return Ok(());
        }
        let tls = TlsFiles::generate()?;
        let server = RedisServer::builder().tls(&tls, false).start()?;
        assert_eq!(
            server.url(),
            format!("rediss://127.0.0.1:{}/", server.port())
        );
        let ca = tls.ca_cert.to_string_lossy().into_owned();
        let port = server.port().to_string();
        assert_eq!(
            redis_cli(&args(&["--tls", "--cacert", &ca, "-p", &port, "PING"]))?,
            "PONG"
        );
        Ok(())
    }
}
