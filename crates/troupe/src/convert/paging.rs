//! Page sizes and page tokens of the listing RPCs.

use tonic::Status;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// A request's page size: 0 takes the default, larger asks are capped.
pub fn page_size(asked: u32) -> usize {
    match asked as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

/// A page token from the parts of the last item's key. Names cannot hold
/// control characters, so a newline separates the parts unambiguously.
pub fn page_token(parts: &[&str]) -> String {
    parts.join("\n")
}

/// The `N` parts of a page token this daemon returned; `None` for no token.
pub fn parse_page_token<const N: usize>(token: &str) -> Result<Option<[&str; N]>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let stranger = || {
        Status::invalid_argument("page_token is not one this daemon returned; start without one")
    };
    let parts: Vec<&str> = token.splitn(N, '\n').collect();
    // Each part is a name this daemon wrote; anything else was not.
    if parts
        .iter()
        .any(|part| troupe_runtime::validate::name("page token", part).is_err())
    {
        return Err(stranger());
    }
    <[&str; N]>::try_from(parts)
        .map(Some)
        .map_err(|_| stranger())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_refuse_strangers() -> Result<(), Status> {
        let token = page_token(&["counter", "c/1", "tick"]);
        assert_eq!(
            parse_page_token::<3>(&token)?,
            Some(["counter", "c/1", "tick"])
        );
        assert_eq!(parse_page_token::<2>("")?, None);
        assert!(parse_page_token::<3>("counter\nc1").is_err());
        assert_eq!(
            (page_size(0), page_size(5), page_size(50_000)),
            (100, 5, 1000)
        );
        Ok(())
    }
}
