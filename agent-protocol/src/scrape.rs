//! The rule both `/metrics` endpoints (the server's and the agent's) use for a scrape token.

/// Whether an `Authorization` header value is `Bearer <token>` for the configured `token`
/// (compared in constant time). An empty token never matches.
pub fn bearer_matches(authorization: Option<&str>, token: &str) -> bool {
    if token.is_empty() {
        return false;
    }
    let sent = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    sent.len() == token.len()
        && sent
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::bearer_matches;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(bearer_matches(Some("Bearer s3cret"), "s3cret"));
        for sent in [
            None,
            Some("Bearer s3cres"),
            Some("bearer s3cret"),
            Some("Bearer s3cret "),
            Some("s3cret"),
        ] {
            assert!(!bearer_matches(sent, "s3cret"), "{sent:?}");
        }
        assert!(!bearer_matches(Some("Bearer "), ""));
    }
}
