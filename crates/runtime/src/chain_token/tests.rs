//! Tokens issued, honoured, tampered with, moved, stale; turn numbers.

use super::*;
use crate::types::ActorId;

fn chain(actors: &[&str]) -> CallChain {
    CallChain {
        id: "c1".into(),
        actors: actors.iter().map(|a| ActorId::new("node", *a)).collect(),
        token: ChainToken::default(),
    }
}

fn issued(tokens: &ChainTokens, actors: &[&str]) -> (NonZeroU64, CallChain) {
    let turn = tokens.begin();
    let mut c = chain(actors);
    tokens.seal(turn, &mut c);
    (turn, c)
}

#[test]
fn a_chain_issued_to_a_running_turn_is_honoured() {
    let tokens = ChainTokens::with_key([7; 16]);
    let (_, c) = issued(&tokens, &["a", "b"]);
    assert_eq!(c.token.as_bytes().len(), TOKEN_LEN);
    assert!(tokens.check(&c, 32).is_ok());
}

#[test]
fn a_chain_without_a_token_is_refused() {
    let tokens = ChainTokens::with_key([7; 16]);
    let result = tokens.check(&chain(&["a"]), 32);
    assert!(
        matches!(result, Err(ChainRefused::NoToken { .. })),
        "{result:?}"
    );
}

#[test]
fn a_tampered_token_or_chain_is_refused() {
    let tokens = ChainTokens::with_key([7; 16]);
    let (_, good) = issued(&tokens, &["a", "b"]);
    let token = good.token.as_bytes().clone();

    // Any flipped bit, in the number or the tag.
    for i in 0..TOKEN_LEN {
        let mut bad = token.to_vec();
        bad[i] ^= 1;
        let c = CallChain {
            token: ChainToken::new(Bytes::from(bad)),
            ..good.clone()
        };
        let result = tokens.check(&c, 32);
        assert!(
            matches!(result, Err(ChainRefused::NotIssued { .. })),
            "byte {i}: {result:?}"
        );
    }
    // Made up, or cut short.
    for bad in [
        vec![0u8; TOKEN_LEN],
        token[..TOKEN_LEN - 1].to_vec(),
        b"x".to_vec(),
    ] {
        let c = CallChain {
            token: ChainToken::new(Bytes::from(bad)),
            ..good.clone()
        };
        assert!(matches!(
            tokens.check(&c, 32),
            Err(ChainRefused::NotIssued { .. })
        ));
    }
    // The token of one chain on another: another id, another actor
    // last, an actor dropped or added.
    let moved = |mut c: CallChain| {
        c.token = good.token.clone();
        tokens.check(&c, 32)
    };
    let other_id = CallChain {
        id: "c2".into(),
        ..chain(&["a", "b"])
    };
    for c in [
        other_id,
        chain(&["a", "x"]),
        chain(&["b"]),
        chain(&["a", "b", "a"]),
    ] {
        assert!(matches!(moved(c), Err(ChainRefused::NotIssued { .. })));
    }
    // Lengths are hashed too: moving a byte between fields changes the tag.
    let shifted = CallChain {
        id: "c1n".into(),
        actors: vec![ActorId::new("ode", "a"), ActorId::new("node", "b")],
        token: ChainToken::default(),
    };
    assert!(matches!(
        moved(shifted),
        Err(ChainRefused::NotIssued { .. })
    ));
}

#[test]
fn another_daemons_token_is_refused() {
    let ours = ChainTokens::with_key([7; 16]);
    let theirs = ChainTokens::with_key([8; 16]);
    let (turn, c) = issued(&theirs, &["a"]);
    // A turn of that number runs here too: only the key differs.
    ours.shard(turn.get()).lock().insert(turn.get());
    assert!(matches!(
        ours.check(&c, 32),
        Err(ChainRefused::NotIssued { .. })
    ));
}

#[test]
fn a_live_token_on_a_chain_with_another_actor_last_is_refused() {
    let tokens = ChainTokens::with_key([7; 16]);
    // b's turn runs; its token, moved to a chain ending in c, would name
    // a turn of c it was not issued to.
    let (_, of_b) = issued(&tokens, &["a", "b"]);
    let as_c = CallChain {
        actors: vec![ActorId::new("node", "a"), ActorId::new("node", "c")],
        ..of_b
    };
    let result = tokens.check(&as_c, 32);
    assert!(
        matches!(result, Err(ChainRefused::NotIssued { .. })),
        "{result:?}"
    );
}

#[test]
fn turn_numbers_are_unique_across_threads_and_runtimes() {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| (0..3000).map(|_| next_number().get()).collect::<Vec<u64>>())
        })
        .collect();
    let mut numbers: Vec<u64> = Vec::new();
    for t in threads {
        numbers.extend(t.join().unwrap_or_default());
    }
    let unique: std::collections::HashSet<_> = numbers.iter().collect();
    assert_eq!((numbers.len(), unique.len()), (4 * 3000, 4 * 3000));
}

#[test]
fn a_chain_is_stale_once_its_turn_ends() {
    let tokens = ChainTokens::with_key([7; 16]);
    let (first, c1) = issued(&tokens, &["a"]);
    let (second, c2) = issued(&tokens, &["a", "b"]);
    tokens.end(first);
    let result = tokens.check(&c1, 32);
    assert!(
        matches!(result, Err(ChainRefused::TurnEnded { .. })),
        "{result:?}"
    );
    // Another turn's chain is untouched.
    assert!(tokens.check(&c2, 32).is_ok());
    tokens.end(second);
    assert!(matches!(
        tokens.check(&c2, 32),
        Err(ChainRefused::TurnEnded { .. })
    ));
    assert_eq!(tokens.running(), 0);
}

#[test]
fn a_chain_deeper_than_any_issued_is_refused_unhashed() {
    let tokens = ChainTokens::with_key([7; 16]);
    let (_, c) = issued(&tokens, &["a", "b", "c"]);
    assert!(tokens.check(&c, 3).is_ok());
    assert!(matches!(
        tokens.check(&c, 2),
        Err(ChainRefused::NotIssued { .. })
    ));
}

#[test]
fn refusals_name_the_chain_never_the_token() {
    let tokens = ChainTokens::with_key([7; 16]);
    let (turn, c) = issued(&tokens, &["a", "b"]);
    tokens.end(turn);
    let Err(refused) = tokens.check(&c, 32) else {
        panic!("a stale chain was honoured");
    };
    let text = refused.to_string();
    assert!(text.contains("c1 (node/a → node/b)"), "{text}");
    assert!(!format!("{c:?}").contains(&format!("{:?}", c.token.as_bytes())));
}

#[test]
fn the_set_of_running_turns_shrinks_after_a_burst() {
    let tokens = ChainTokens::with_key([7; 16]);
    let turns: Vec<_> = (0..100_000).map(|_| tokens.begin()).collect();
    for turn in turns {
        tokens.end(turn);
    }
    let capacity: usize = tokens.live.iter().map(|s| s.0.lock().capacity()).sum();
    assert!(
        capacity < SHARDS * MIN_SHRINK_CAPACITY,
        "capacity {capacity}"
    );
}
