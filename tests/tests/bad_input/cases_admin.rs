//! The listings (ListActors, ListStoredActors, ListReminders): types, page
//! sizes and page tokens; and Status, which takes no input.

use troupe_tests::*;

use crate::expect::{bad, case, Case, Expect};
use crate::requests::{Apis, Req};

/// The next page token of a one-item page of each listing, in the order
/// of [`LISTINGS`].
pub async fn page_tokens(apis: &mut Apis) -> anyhow::Result<Vec<String>> {
    within(WAIT, "the page tokens", async {
        let mut tokens = Vec::new();
        for (rpc, ty) in LISTINGS {
            let token = match listing(rpc, ty, 1, "") {
                Req::ListActors(r) => {
                    apis.admin
                        .list_actors(r)
                        .await?
                        .into_inner()
                        .next_page_token
                }
                Req::ListStoredActors(r) => {
                    let page = apis.admin.list_stored_actors(r).await?;
                    page.into_inner().next_page_token
                }
                Req::ListReminders(r) => {
                    let page = apis.client.list_reminders(r).await?;
                    page.into_inner().next_page_token
                }
                other => anyhow::bail!("not a listing: {other:?}"),
            };
            anyhow::ensure!(!token.is_empty(), "{rpc} gave no next page token");
            tokens.push(token);
        }
        Ok(tokens)
    })
    .await?
}

/// A request to the listing `rpc` ("ListActors", "ListStoredActors" or
/// "ListReminders") of actor type `ty`.
fn listing(rpc: &str, ty: &str, page_size: u32, page_token: &str) -> Req {
    let (r#type, page_token) = (ty.to_owned(), page_token.to_owned());
    match rpc {
        "ListActors" => Req::ListActors(pb::ListActorsRequest {
            r#type,
            page_size,
            page_token,
        }),
        "ListStoredActors" => Req::ListStoredActors(pb::ListStoredActorsRequest {
            r#type,
            page_size,
            page_token,
        }),
        _ => Req::ListReminders(pb::ListRemindersRequest {
            r#type,
            id: String::new(),
            page_size,
            page_token,
        }),
    }
}

/// The listings, each with the type its page token was taken for.
const LISTINGS: [(&str, &str); 3] = [
    ("ListActors", ""),
    ("ListStoredActors", "counter"),
    ("ListReminders", "counter"),
];

pub fn listing_cases(tokens: &[String]) -> Vec<Case> {
    let mut cases = Vec::new();
    // One row: each listing with type `ty` (`None`: the listing's own), a
    // page size and token, and its expectation, in the order of LISTINGS.
    let mut row =
        |category, what: &str, ty: Option<&str>, size, token: &str, expect: [Expect; 3]| {
            for ((rpc, own_type), expect) in LISTINGS.into_iter().zip(expect) {
                let req = listing(rpc, ty.unwrap_or(own_type), size, token);
                cases.push(case(category, what, req, expect));
            }
        };
    let no_type = [Expect::Ok, bad(&["needs an actor type"]), Expect::Ok];
    row("names", "no type", Some(""), 0, "", no_type);
    let long = bad(&["actor type", "257 bytes"]);
    row(
        "names",
        "type of 257 bytes",
        Some(&"t".repeat(257)),
        0,
        "",
        [long; 3],
    );
    let control = bad(&["actor type", "control characters"]);
    row(
        "names",
        "type with NUL",
        Some("coun\0ter"),
        0,
        "",
        [control; 3],
    );
    row(
        "unknown",
        "unknown type",
        Some("nosuch"),
        0,
        "",
        [Expect::Ok; 3],
    );
    // Page sizes are unsigned: 0 takes the default, larger ones are capped.
    for size in [0, 1, u32::MAX] {
        row(
            "paging",
            &format!("page_size {size}"),
            None,
            size,
            "",
            [Expect::Ok; 3],
        );
    }
    // Tokens: each listing's own works; a stranger's, garbage and over-long
    // ones are refused. Tokens are the last key listed, in plain text, so a
    // printable one is read as "resume after this key": a listing of one
    // part cannot tell it from its own.
    let refused = bad(&["page_token", "not one this daemon returned"]);
    let own = |i| {
        let mut expect = [refused; 3];
        expect[i] = Expect::Ok;
        expect
    };
    for (i, ((rpc, _), token)) in LISTINGS.iter().zip(tokens).enumerate() {
        row(
            "paging",
            &format!("{rpc}'s own token"),
            None,
            0,
            token,
            own(i),
        );
    }
    let three_parts = ["a", "b", "c"].map(|p| p.repeat(300)).join("\n");
    for (what, token, expect) in [
        ("garbage with control bytes", "\u{1}garbage\0", [refused; 3]),
        ("three parts of 300 bytes", &three_parts, [refused; 3]),
        ("100 KiB", &"t".repeat(100 * 1024), [refused; 3]),
        ("empty parts", "\n\n", [refused; 3]),
        ("printable garbage", "garbage", own(1)),
    ] {
        row(
            "paging",
            &format!("page_token {what}"),
            None,
            0,
            token,
            expect,
        );
    }
    let reminders = |ty: &str, id: &str| {
        Req::ListReminders(pb::ListRemindersRequest {
            r#type: ty.into(),
            id: id.into(),
            ..Default::default()
        })
    };
    cases.extend([
        case("no-input", "status", Req::Status, Expect::Ok),
        case(
            "names",
            "id with NUL",
            reminders("counter", "ke\0ep"),
            bad(&["actor id", "control characters"]),
        ),
        case(
            "names",
            "id without a type",
            reminders("", "keep"),
            bad(&["needs its type"]),
        ),
    ]);
    cases
}
