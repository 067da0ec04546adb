//! Where Stripe is, and the client that talks to it (the sync and the webhook are billing's).

use std::time::Duration;

use crate::error::{Error, Result};

/// Where Stripe is and the keys to talk to it. Configuration, never code: tests and
/// `cargo xtask dev` point `api_base` at the local Stripe test server.
#[derive(Clone, Debug)]
pub struct StripeSettings {
    /// e.g. `https://api.stripe.com/` or `http://127.0.0.1:12111/`.
    pub api_base: String,
    pub secret_key: String,
    /// The endpoint's `whsec_…` signing secret.
    pub webhook_secret: String,
    /// How long one call may take before it is given up (and retried with the same
    /// idempotency key): [`StripeSettings::TIMEOUT`] unless a test wants it shorter.
    pub timeout: Duration,
}

impl StripeSettings {
    pub const TIMEOUT: Duration = Duration::from_secs(20);
}

#[derive(Clone)]
pub struct StripeLink {
    client: stripe::Client,
    webhook_secret: String,
}

impl std::fmt::Debug for StripeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StripeLink { .. }")
    }
}

impl StripeLink {
    pub fn new(settings: &StripeSettings) -> Result<Self> {
        let mut base = settings.api_base.clone();
        if !base.ends_with('/') {
            base.push('/');
        }
        let client = stripe::ClientBuilder::new(settings.secret_key.clone())
            .url(base)
            .timeout(settings.timeout)
            .build()
            .map_err(|e| Error::Invalid {
                field: "stripe",
                reason: e.to_string(),
            })?;
        Ok(Self {
            client,
            webhook_secret: settings.webhook_secret.clone(),
        })
    }

    pub fn client(&self) -> &stripe::Client {
        &self.client
    }

    /// The endpoint's `whsec_…` signing secret.
    pub fn webhook_secret(&self) -> &str {
        &self.webhook_secret
    }
}
