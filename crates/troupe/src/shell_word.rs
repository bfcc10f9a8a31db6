//! Words as a shell needs them typed, for commands the CLI and `troupe dev`
//! print for people to paste.

/// `word` as one shell word: as it is when nothing in it is special to a
/// shell, else in single quotes (a `$`, as in a delayed tell's reminder
/// name, would expand inside double quotes).
pub fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn only_special_words_are_quoted() {
        assert_eq!(quoted("counter"), "counter");
        assert_eq!(quoted("$tell:ab12"), "'$tell:ab12'");
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted(""), "''");
    }
}
