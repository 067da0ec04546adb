//! ID-token verification with real signatures. A real provider (used by the browser tests)
//! can't be made to issue an expired token, one for another audience or one with another
//! sign-in's nonce, so these are signed here with a test-only RSA key
//! (`fixtures/id-token-test-key.pem`) and checked by the same function the sign-in uses.

use chrono::{Duration, Utc};
use control_plane::sso::{SsoError, TokenProblem, verify_id_token};
use openidconnect::core::{
    CoreGenderClaim, CoreIdToken, CoreIdTokenVerifier, CoreJsonWebKeySet,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey,
};
use openidconnect::{
    AdditionalClaims, Audience, ClientId, ClientSecret, EndUserEmail, IdToken, IdTokenClaims,
    IssuerUrl, JsonWebKeyId, Nonce, PrivateSigningKey, StandardClaims, SubjectIdentifier,
};
use serde::{Deserialize, Serialize};

const ISSUER: &str = "https://idp.acme.example";
const CLIENT: &str = "portal-acme";
const NONCE: &str = "nonce-of-this-sign-in";

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Groups {
    groups: Vec<String>,
}
impl AdditionalClaims for Groups {}

fn key(kid: &str) -> CoreRsaPrivateSigningKey {
    let pem = include_str!("../fixtures/id-token-test-key.pem");
    CoreRsaPrivateSigningKey::from_pem(pem, Some(JsonWebKeyId::new(kid.into()))).unwrap()
}

struct Token {
    issuer: &'static str,
    audience: &'static str,
    nonce: &'static str,
    expires_in: Duration,
    kid: &'static str,
}

impl Default for Token {
    fn default() -> Self {
        Token {
            issuer: ISSUER,
            audience: CLIENT,
            nonce: NONCE,
            expires_in: Duration::minutes(5),
            kid: "k1",
        }
    }
}

fn sign(t: Token) -> CoreIdToken {
    let now = Utc::now();
    let claims = IdTokenClaims::new(
        IssuerUrl::new(t.issuer.into()).unwrap(),
        vec![Audience::new(t.audience.into())],
        now + t.expires_in,
        now - Duration::seconds(10),
        StandardClaims::<CoreGenderClaim>::new(SubjectIdentifier::new("alice-0001".into()))
            .set_email(Some(EndUserEmail::new("alice@acme.example".into())))
            .set_email_verified(Some(true)),
        Groups {
            groups: vec!["acme-admins".into(), "everyone".into()],
        },
    )
    .set_nonce(Some(Nonce::new(t.nonce.into())));
    let token: IdToken<
        Groups,
        CoreGenderClaim,
        CoreJweContentEncryptionAlgorithm,
        CoreJwsSigningAlgorithm,
    > = IdToken::new(
        claims,
        &key(t.kid),
        CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
        None,
        None,
    )
    .unwrap();
    // What the portal receives: the compact JWT, read with the core (no extra claims) types.
    serde_json::from_value(serde_json::to_value(&token).unwrap()).unwrap()
}

fn verifier(keys_kid: &str) -> CoreIdTokenVerifier<'static> {
    let jwks = CoreJsonWebKeySet::new(vec![key(keys_kid).as_verification_key()]);
    CoreIdTokenVerifier::new_confidential_client(
        ClientId::new(CLIENT.into()),
        ClientSecret::new("secret".into()),
        IssuerUrl::new(ISSUER.into()).unwrap(),
        jwks,
    )
}

fn verify(token: CoreIdToken) -> Result<control_plane::sso::VerifiedIdentity, SsoError> {
    verify_id_token(&verifier("k1"), &token, &Nonce::new(NONCE.into()), "groups")
}

#[test]
fn a_good_token_yields_the_identity_and_the_role_claim() {
    let id = verify(sign(Token::default())).unwrap();
    assert_eq!(id.issuer, ISSUER);
    assert_eq!(id.subject, "alice-0001");
    assert_eq!(id.email.as_deref(), Some("alice@acme.example"));
    assert!(id.email_verified);
    assert_eq!(id.role_claim_values, ["acme-admins", "everyone"]);
}

#[test]
fn an_expired_token_is_refused() {
    let err = verify(sign(Token {
        expires_in: Duration::minutes(-5),
        ..Token::default()
    }))
    .unwrap_err();
    assert_eq!(err, SsoError::TokenRejected(TokenProblem::Expired));
    assert_eq!(err.code(), "token_expired");
}

#[test]
fn a_token_for_another_audience_is_refused() {
    let err = verify(sign(Token {
        audience: "some-other-app",
        ..Token::default()
    }))
    .unwrap_err();
    assert_eq!(err, SsoError::TokenRejected(TokenProblem::WrongAudience));
}

#[test]
fn a_token_of_another_sign_in_is_refused_by_its_nonce() {
    let err = verify(sign(Token {
        nonce: "nonce-of-someone-elses-sign-in",
        ..Token::default()
    }))
    .unwrap_err();
    assert_eq!(err, SsoError::TokenRejected(TokenProblem::WrongNonce));
    assert_eq!(
        err.to_string(),
        "the identity provider's token was not accepted: it belongs to another sign-in (nonce)"
    );
}

#[test]
fn a_token_from_another_issuer_is_refused() {
    let err = verify(sign(Token {
        issuer: "https://idp.evil.example",
        ..Token::default()
    }))
    .unwrap_err();
    assert_eq!(err, SsoError::TokenRejected(TokenProblem::WrongIssuer));
}

#[test]
fn a_token_signed_with_a_key_the_provider_does_not_publish_is_refused() {
    // Same key material, but the provider's key set only knows "k2": no key matches.
    let err = verify_id_token(
        &verifier("k2"),
        &sign(Token::default()),
        &Nonce::new(NONCE.into()),
        "groups",
    )
    .unwrap_err();
    assert!(
        matches!(err, SsoError::TokenRejected(TokenProblem::BadSignature)),
        "{err:?}"
    );
}

#[test]
fn a_token_whose_payload_was_changed_is_refused() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let good = sign(Token::default()).to_string();
    let parts: Vec<&str> = good.split('.').collect();
    let mut payload: serde_json::Value =
        serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    payload["sub"] = "mallory-0666".into();
    payload["email"] = "mallory@acme.example".into();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64.encode(serde_json::to_vec(&payload).unwrap()),
        parts[2]
    );
    let forged: CoreIdToken = forged.parse().expect("still a well-formed JWT");
    assert_eq!(
        verify(forged).unwrap_err(),
        SsoError::TokenRejected(TokenProblem::BadSignature)
    );
}
