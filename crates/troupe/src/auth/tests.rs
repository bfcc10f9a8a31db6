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
        refuse_short: false,
    }
}

fn with(token: &str) -> MetadataMap {
    let mut m = MetadataMap::new();
    if let Ok(v) = format!("Bearer {token}").parse() {
        m.insert(AUTHORIZATION, v);
    }
    m
}

/// Renames a file holding `content` over `path`, as a secret mount
/// updates, and waits until the watcher took it: until `token` is accepted.
async fn replace(
    path: &std::path::Path,
    content: &str,
    tokens: &Tokens,
    token: &str,
) -> std::io::Result<()> {
    let next = path.with_extension("new");
    std::fs::write(&next, content)?;
    std::fs::rename(&next, path)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokens.check(&with(token), || None).is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
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
    assert!(tokens.check(&with("old"), || None).is_ok());
    assert!(tokens.check(&with("new"), || None).is_ok());
    for wrong in [with("ol"), with("old2"), with(""), MetadataMap::new()] {
        let status = tokens.check(&wrong, || None).err();
        assert_eq!(status.map(|s| s.code()), Some(tonic::Code::Unauthenticated));
    }
    Ok(())
}

#[test]
fn errors_name_what_is_expected_and_never_a_token() -> Result<(), TokenError> {
    let tokens = Tokens::load(source(&["s3cret-value"], None))?;
    for metadata in [MetadataMap::new(), with("guess")] {
        let Err(status) = tokens.check(&metadata, || None) else {
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
    assert!(tokens.check(&with("first"), || None).is_ok());
    replace(&path, "second\n", &tokens, "second").await?;
    assert!(tokens.check(&with("first"), || None).is_err());
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

#[tokio::test]
async fn each_token_counts_its_own_use_and_keeps_it_across_a_reload(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, "old\n")?;
    let tokens = Tokens::load(source(&["env-one"], Some(path.clone())))?;
    let watcher = tokens.watch();
    let caller: std::net::SocketAddr = ([10, 0, 0, 7], 5000).into();
    for _ in 0..3 {
        tokens.check(&with("old"), || Some(caller))?;
    }
    let named = tokens.check_naming(&with("env-one"), || None)?;
    assert_eq!(named.to_string(), "token 1 of TROUPE_API_TOKEN");
    let shown = |tokens: &Tokens| -> Vec<(String, u64)> {
        tokens
            .usage()
            .into_iter()
            .map(|u| (u.place.to_string(), u.accepted))
            .collect()
    };
    let file = path.display();
    assert_eq!(
        shown(&tokens),
        vec![
            ("token 1 of TROUPE_API_TOKEN".to_owned(), 1),
            (format!("token 1 of {file}"), 3),
        ]
    );
    assert_eq!(tokens.usage()[1].last_from, Some(caller));

    // Rotation: the new token first, the old one moved down keeps its count.
    replace(&path, "new\nold\n", &tokens, "new").await?;
    assert_eq!(
        shown(&tokens),
        vec![
            ("token 1 of TROUPE_API_TOKEN".to_owned(), 1),
            (format!("token 1 of {file}"), 1),
            (format!("token 2 of {file}"), 3),
        ]
    );
    assert!(tokens.usage()[1].last_from.is_none());
    if let Some(w) = watcher {
        w.abort();
    }
    Ok(())
}

#[test]
fn a_refused_token_counts_for_none() -> Result<(), TokenError> {
    let tokens = Tokens::load(source(&["one", "two"], None))?;
    assert!(tokens.check(&with("three"), || None).is_err());
    assert!(tokens.check(&MetadataMap::new(), || None).is_err());
    assert!(tokens.usage().iter().all(|u| u.accepted == 0));
    Ok(())
}

/// Where other machines reach the daemon, a short token is refused: at the
/// start, named by its place and never shown; and in a changed file, which
/// is then not taken, so the tokens before keep working.
#[test]
fn a_short_token_is_refused_where_it_can_be_guessed() -> Result<(), Box<dyn std::error::Error>> {
    let long = "a-token-long-enough-to-keep";
    let exposed = |inline: &[&str], file| TokenSource {
        refuse_short: true,
        ..source(inline, file)
    };
    match Tokens::load(exposed(&[long, "hunter2"], None)) {
        Err(TokenError::TooShort { place, chars }) => {
            assert_eq!(place.to_string(), "token 2 of TROUPE_API_TOKEN");
            assert_eq!(chars, 7);
        }
        other => panic!("a short token was not refused: {other:?}"),
    }
    let refused = Tokens::load(exposed(&["hunter2"], None))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!refused.contains("hunter2"), "the token shown: {refused}");
    // Long enough: 16 characters.
    assert!(Tokens::load(exposed(&["0123456789abcdef"], None)).is_ok());

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{long}\n"))?;
    let tokens = Tokens::load(exposed(&[], Some(path.clone())))?;
    std::fs::write(&path, "another-token-long-enough\nhunter2\n")?;
    assert!(matches!(
        tokens.reload(),
        Err(TokenError::TooShort { chars: 7, .. })
    ));
    assert!(tokens.check(&with(long), || None).is_ok());
    assert!(tokens
        .check(&with("another-token-long-enough"), || None)
        .is_err());
    assert!(tokens.check(&with("hunter2"), || None).is_err());
    Ok(())
}
