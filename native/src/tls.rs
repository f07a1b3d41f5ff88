//! TLS of the listener (rustls): the server's certificate chain and key, and with a client CA, client
//! certificates required and verified against it (mTLS). HTTP/2 is offered by ALPN, as gRPC needs.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub fn server_config(certificate_pem: &[u8], key_pem: &[u8], client_ca_pem: Option<&[u8]>) -> Result<ServerConfig, String> {
    #[allow(deprecated)] // ring: no post-quantum key exchange, and no C toolchain beyond cc to build
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(certificate_pem)
        .collect::<Result<_, _>>()
        .map_err(|err| format!("the server certificate is not PEM: {err}"))?;
    if chain.is_empty() {
        return Err("the server certificate file holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| format!("the server key is not a PEM key: {err}"))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate = certificate.map_err(|err| format!("the client CA is not PEM: {err}"))?;
                roots.add(certificate).map_err(|err| format!("the client CA: {err}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| format!("the client CA: {err}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|err| format!("the server certificate and key: {err}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
