//! Whether an ext_proc caller is the gateway, as `router.fronts.auth.GatewayCheck` decides it for the grpcio servicer:
//! `authorization: Bearer <token>` in its call metadata for one of the gateway's tokens (compared through their
//! SHA-256 digests, every one of them, in constant time), or a client certificate naming one of the gateway's
//! identities (a subject alternative name — DNS, URI, e-mail or IP address — or the common name).

use std::collections::HashSet;

use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

pub struct GatewayCheck {
    /// SHA-256 digests of the gateway's tokens.
    pub digests: Vec<[u8; 32]>,
    pub identities: HashSet<String>,
    /// With no credential configured: whether callers' exchanges are telemetry all the same.
    pub unauthenticated: bool,
}

impl GatewayCheck {
    fn configured(&self) -> bool {
        !self.digests.is_empty() || !self.identities.is_empty()
    }

    fn allows(&self, authorization: Option<&[u8]>) -> bool {
        if self.digests.is_empty() {
            return false;
        }
        let text = String::from_utf8_lossy(authorization.unwrap_or_default());
        let (scheme, token) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let mut matched = false;
        for known in &self.digests {
            let mut differ = 0u8;
            for (a, b) in digest.iter().zip(known) {
                differ |= a ^ b;
            }
            matched |= differ == 0;
        }
        matched && scheme.eq_ignore_ascii_case("bearer")
    }

    /// For a stream: Some(true) when its exchanges become telemetry, Some(false) when they are routed without,
    /// None when the caller must be refused.
    pub fn judge(&self, authorization: Option<&[u8]>, presented: &[String]) -> Option<bool> {
        if self.allows(authorization) || presented.iter().any(|name| self.identities.contains(name)) {
            return Some(true);
        }
        if self.configured() {
            return None;
        }
        Some(self.unauthenticated)
    }
}

/// The names a client certificate (DER) carries, as gRPC core reports them: its subject alternative names and
/// its subject's common names.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, certificate)) = X509Certificate::from_der(der) else { return Vec::new() };
    let mut names = Vec::new();
    if let Ok(Some(san)) = certificate.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::URI(n) | GeneralName::RFC822Name(n) => names.push(n.to_string()),
                GeneralName::IPAddress(ip) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*ip) {
                        names.push(std::net::Ipv4Addr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*ip) {
                        names.push(std::net::Ipv6Addr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    for cn in certificate.subject().iter_common_name() {
        if let Ok(text) = cn.as_str() {
            names.push(text.to_string());
        }
    }
    names
}
