//! Tokens and signatures: what a minted token grants ([`Grant`]), the development signing key
//! ([`SigningKey`]) and the public half that checks its signatures ([`PublicKey`]), API keys
//! ([`new_api_key`]) and the header a client presents a credential in ([`bearer_headers`]).

use super::{API_KEY_PREFIX, Claims, parse_jwks};
use crate::Error;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use sessionlog_log::{AuthSettings, Role};
use sessionlog_schemas::SessionId;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// What a minted token grants.
#[derive(Clone, Debug)]
pub struct Grant {
    /// Who it speaks for.
    pub subject: String,
    /// What it may do.
    pub roles: Vec<Role>,
    /// The one session it may act on, if narrowed.
    pub session: Option<SessionId>,
    /// The tenant (`default` when `None`).
    pub tenant: Option<String>,
    /// `iss`; must equal `auth.issuer` of the services.
    pub issuer: String,
    /// `aud`; must equal `auth.audience` of the services.
    pub audience: String,
    /// When it stops being valid (`exp`).
    pub expires: std::time::SystemTime,
}

impl Grant {
    /// A grant for `subject` with `roles`, for the default issuer and audience, valid for
    /// `ttl` from now.
    pub fn new(subject: &str, roles: &[Role], ttl: Duration) -> Self {
        let defaults = AuthSettings::default();
        Self {
            subject: subject.to_string(),
            roles: roles.to_vec(),
            session: None,
            tenant: None,
            issuer: defaults.issuer,
            audience: defaults.audience,
            expires: std::time::SystemTime::now() + ttl,
        }
    }
}

/// Headers a client sends to present `credential` (a token or an API key) to the services:
/// `Authorization: Bearer <credential>`, marked sensitive so a client's debug output never
/// shows it.
pub fn bearer_headers(credential: &str) -> Result<reqwest::header::HeaderMap, Error> {
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {credential}"))
        .map_err(Error::Credential)?;
    value.set_sensitive(true);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, value);
    Ok(headers)
}

/// A signing key for development and tests: ES256 (P-256), made here, published as a JWKS
/// that the services read (`auth.jwks_file`). Production tokens come from your identity
/// provider instead; the services only ever see its JWKS.
pub struct SigningKey {
    kid: String,
    pub(super) pkcs8: Vec<u8>,
    x: Vec<u8>,
    y: Vec<u8>,
}

impl SigningKey {
    /// A fresh key.
    pub fn generate() -> Result<Self, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| Error::Key("could not generate a P-256 key".into()))?;
        Self::from_pkcs8(pkcs8.as_ref())
    }

    /// The key from its PEM (`PRIVATE KEY`, PKCS#8), as [`Self::pem`] writes it.
    pub fn from_pem(pem: &str) -> Result<Self, Error> {
        // PEM is base64 between two marker lines; written out here because the one PEM reader
        // in the tree (inside jsonwebtoken) is private to it.
        let body: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::trim)
            .collect();
        let der = STANDARD
            .decode(body)
            .map_err(|e| Error::Key(format!("not a PEM private key: {e}")))?;
        Self::from_pkcs8(&der)
    }

    fn from_pkcs8(der: &[u8]) -> Result<Self, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|e| Error::Key(format!("not a P-256 PKCS#8 key: {e}")))?;
        // Uncompressed point: 0x04, then 32 bytes of x and 32 of y.
        let point = pair.public_key().as_ref();
        if point.len() != 65 {
            return Err(Error::Key("unexpected public key encoding".into()));
        }
        Ok(Self {
            kid: hex::encode(&Sha256::digest(point)[..8]),
            pkcs8: der.to_vec(),
            x: point[1..33].to_vec(),
            y: point[33..].to_vec(),
        })
    }

    /// The key id tokens name in their header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// An ECDSA P-256 (SHA-256, fixed-length r‖s) signature of `message`: how the recovery
    /// service attests the privileged events it appends.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &self.pkcs8)
            .map_err(|e| Error::Key(format!("unusable signing key: {e}")))?;
        let rng = aws_lc_rs::rand::SystemRandom::new();
        pair.sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| Error::Key("could not sign".into()))
    }

    /// The public half, to verify what [`Self::sign`] signed.
    pub fn public_key(&self) -> PublicKey {
        let mut point = vec![4u8];
        point.extend_from_slice(&self.x);
        point.extend_from_slice(&self.y);
        PublicKey {
            kid: self.kid.clone(),
            point,
        }
    }

    /// The private key as PEM, to keep in a file of mode 600.
    pub fn pem(&self) -> String {
        let b64 = STANDARD.encode(&self.pkcs8);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap_or_default())
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    /// The public key as a JWKS document for `auth.jwks_file`.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({ "keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&self.x), "y": URL_SAFE_NO_PAD.encode(&self.y),
        }]})
    }

    /// A signed token for `grant`.
    pub fn mint(&self, grant: &Grant) -> Result<String, Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = Claims {
            sub: grant.subject.clone(),
            roles: grant.roles.iter().map(|r| r.as_str().to_string()).collect(),
            session: grant.session.map(|s| s.to_string()),
            tenant: grant.tenant.clone(),
            exp: Some(
                grant
                    .expires
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            iss: Some(grant.issuer.clone()),
            aud: Some(grant.audience.clone()),
            iat: Some(now),
            nbf: None,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&self.pkcs8))
            .map_err(|e| Error::Key(format!("could not sign: {e}")))
    }
}

/// A P-256 public key that checks [`SigningKey::sign`] signatures.
#[derive(Clone, Debug)]
pub struct PublicKey {
    /// Its key id.
    pub kid: String,
    point: Vec<u8>,
}

impl PublicKey {
    /// The EC P-256 keys of a JWKS document (other keys are skipped): the retired keys whose
    /// old signatures must still verify after a rotation.
    pub fn from_jwks(text: &str, from: &str) -> Result<Vec<Self>, Error> {
        let set = parse_jwks(text, from)?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| {
                let kid = jwk.common.key_id.clone()?;
                match &jwk.algorithm {
                    jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(ec) => {
                        let x = URL_SAFE_NO_PAD.decode(&ec.x).ok()?;
                        let y = URL_SAFE_NO_PAD.decode(&ec.y).ok()?;
                        let mut point = vec![4u8];
                        point.extend_from_slice(&x);
                        point.extend_from_slice(&y);
                        Some(Self { kid, point })
                    }
                    _ => None,
                }
            })
            .collect())
    }

    /// Whether `signature` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.point)
            .verify(message, signature)
            .is_ok()
    }
}

/// A new API key for `id`: the key to give the machine, and the hex SHA-256 for the settings.
pub fn new_api_key(id: &str) -> Result<(String, String), Error> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(Error::Key(format!(
            "API key id {id:?}: use letters, digits and '-' only"
        )));
    }
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::fill(&mut secret).map_err(|_| Error::Key("no randomness".into()))?;
    let key = format!("{API_KEY_PREFIX}{id}_{}", URL_SAFE_NO_PAD.encode(secret));
    let hash = hex::encode(Sha256::digest(key.as_bytes()));
    Ok((key, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers_carry_the_credential_hidden_and_refuse_a_broken_one() {
        let headers = bearer_headers("slk_abc").unwrap();
        let value = &headers[reqwest::header::AUTHORIZATION];
        assert_eq!(value.to_str().unwrap(), "Bearer slk_abc");
        assert!(value.is_sensitive());
        assert!(!format!("{headers:?}").contains("slk_abc"));
        assert!(matches!(
            bearer_headers("slk\nX-Injected: 1"),
            Err(Error::Credential(_))
        ));
    }

    #[test]
    fn a_signature_verifies_under_its_key_only_and_only_for_its_message() {
        let key = SigningKey::generate().expect("key");
        let other = SigningKey::generate().expect("key");
        let signature = key.sign(b"statement").expect("sign");
        assert!(key.public_key().verifies(b"statement", &signature));
        assert!(!key.public_key().verifies(b"statement!", &signature));
        assert!(!other.public_key().verifies(b"statement", &signature));
        let from_jwks = PublicKey::from_jwks(&key.jwks().to_string(), "test").expect("jwks");
        assert!(from_jwks[0].verifies(b"statement", &signature));
    }
}
