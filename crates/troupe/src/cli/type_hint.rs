//! The note under an empty answer about an actor type no app attached to
//! the daemon hosts: a misspelt type (`carts` for `cart`) otherwise reads
//! as an actor or a type with nothing in it.

use troupe_proto::v1 as pb;

use super::{tell_user, Daemon};

/// Tells the user, on stderr, when no app attached to `daemon` hosts `ty`,
/// naming the types its apps do host. Nothing when one does, or when the
/// daemon's status cannot be read: the note is a courtesy, never a failure.
pub(super) async fn note_if_unhosted(daemon: &Daemon, ty: &str) {
    let Ok(status) = daemon.admin().status(pb::StatusRequest {}).await else {
        return;
    };
    tell_user(format_args!("{}", note_for(&status.into_inner(), ty)));
}

fn note_for(status: &pb::StatusResponse, ty: &str) -> String {
    let mut hosted: Vec<&str> = status.types.iter().map(|t| t.name.as_str()).collect();
    if hosted.contains(&ty) {
        return String::new();
    }
    hosted.sort_unstable();
    let which = if hosted.is_empty() {
        "no app is attached".to_owned()
    } else {
        format!("its apps host {}", hosted.join(", "))
    };
    format!("note: no app attached to this daemon hosts actor type {ty:?} ({which}); check the type name\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosting(names: &[&str]) -> pb::StatusResponse {
        pb::StatusResponse {
            types: names
                .iter()
                .map(|n| pb::RegisteredType {
                    name: (*n).to_owned(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_hosted_type_gets_no_note_and_another_names_the_hosted_ones() {
        assert_eq!(note_for(&hosting(&["cart"]), "cart"), "");
        assert_eq!(
            note_for(&hosting(&["vault", "cart"]), "carts"),
            "note: no app attached to this daemon hosts actor type \"carts\" (its apps host cart, vault); check the type name\n"
        );
        assert_eq!(
            note_for(&hosting(&[]), "cart"),
            "note: no app attached to this daemon hosts actor type \"cart\" (no app is attached); check the type name\n"
        );
    }
}
