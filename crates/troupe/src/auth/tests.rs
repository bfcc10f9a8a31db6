//! Tokens accepted, refused and reloaded.

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::MetadataMap;

use super::*;

fn source(inline: &[&str], file: Option<PathBuf>) -> TokenSource {
    TokenSource {
        credential: Credential::Api,
        inline: inline.iter().map(|s| s.to_string()).collect(),
        file,
    }
}

fn with(token: &str) -> MetadataMap {
    let mut m = MetadataMap::new();
    if let Ok(v) = format!("Bearer {token}").parse() {
        m.insert(AUTHORIZATION, v);
    }
    m
}

#[test]
fn tokens_split_by_lines_and_commas_skipping_comments() {
    assert_eq!(
        parse_tokens("# rotation\n old , new\n\n third\n"),
        vec!["old", "new", "third"]
    );
}

#[test]
fn every_accepted_token_works_and_nothing_else() -> Result<(), TokenError> {
    let tokens = Tokens::load(source(&["old", "new"], None))?;
    assert!(tokens.check(&with("old")).is_ok());
    assert!(tokens.check(&with("new")).is_ok());
    for wrong in [with("ol"), with("old2"), with(""), MetadataMap::new()] {
        let status = tokens.check(&wrong).err();
        assert_eq!(status.map(|s| s.code()), Some(tonic::Code::Unauthenticated));
    }
    Ok(())
}

#[test]
fn errors_name_what_is_expected_and_never_a_token() -> Result<(), TokenError> {
    let tokens = Tokens::load(source(&["s3cret-value"], None))?;
    for metadata in [MetadataMap::new(), with("guess")] {
        let Err(status) = tokens.check(&metadata) else {
            panic!("accepted without the token");
        };
        assert!(status.message().contains("TROUPE_API_TOKEN"), "{status:?}");
        assert!(!status.message().contains("s3cret"), "{status:?}");
    }
    assert!(!format!("{tokens:?}").contains("s3cret"));
    Ok(())
}

#[test]
fn a_file_without_tokens_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, "# nothing yet\n")?;
    let result = Tokens::load(source(&[], Some(path.clone())));
    assert!(matches!(result, Err(TokenError::Empty { .. })));
    let missing = Tokens::load(source(&[], Some(dir.path().join("absent"))));
    assert!(matches!(missing, Err(TokenError::Unreadable { .. })));
    Ok(())
}

#[tokio::test]
async fn a_changed_file_is_used_without_a_restart() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, "first\n")?;
    let tokens = Tokens::load(source(&[], Some(path.clone())))?;
    let watcher = tokens.watch();
    assert!(tokens.check(&with("first")).is_ok());
    // A new file renamed over the old one, as a secret mount updates.
    let next = dir.path().join("token.new");
    std::fs::write(&next, "second\n")?;
    std::fs::rename(&next, &path)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokens.check(&with("second")).is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tokens.check(&with("first")).is_err());
    if let Some(w) = watcher {
        w.abort();
    }
    Ok(())
}

#[test]
fn peers_are_shown_the_first_token_as_the_file_has_it_now() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, "old\n")?;
    let presented = peer_authorization(source(&[], Some(path.clone())))?;
    let shown = |p: &Authorization| {
        p.current()
            .map(|v| v.to_str().unwrap_or_default().to_owned())
    };
    assert_eq!(shown(&presented).as_deref(), Some("Bearer old"));
    // Rotation: the new token first (peers already accept both).
    let next = dir.path().join("token.next");
    std::fs::write(&next, "new\nold\n")?;
    std::fs::rename(&next, &path)?;
    assert_eq!(shown(&presented).as_deref(), Some("Bearer new"));
    // Emptied for a moment: the last token is still shown.
    std::fs::write(&path, "")?;
    assert_eq!(shown(&presented).as_deref(), Some("Bearer new"));
    Ok(())
}
