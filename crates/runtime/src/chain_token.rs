//! Chains the daemon issued: the token on the chain handed to each running
//! turn, and the set of turns still running, which makes a token stale the
//! moment its turn ends.
//!
//! A chain lets a call nest in a running turn (re-entrancy), so a caller
//! that could name any chain could run code beside any turn. The daemon
//! therefore honours a chain only when it issued it to a turn that still
//! runs. A token is the turn's number (8 bytes, little-endian) and a
//! SipHash-2-4-128 tag (16 bytes) under a key drawn from the operating
//! system when the runtime is created, over the number, the chain's id and
//! its actors. The tag makes tokens unforgeable and binds each to its
//! chain's contents; the number, looked up among the running turns, makes
//! it stale once that turn ends (and a restart, with a new key, makes every
//! older token fail to verify).
//!
//! Only turns whose host asks for a chain ([`TurnDone::chain_for_calls`],
//! as the app stream does for every turn) get a number, so in-process
//! hosts that make no calls pay nothing.
//!
//! [`TurnDone::chain_for_calls`]: crate::TurnDone::chain_for_calls

use std::hash::Hasher as _;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hashbrown::HashSet;
use parking_lot::Mutex;
use siphasher::sip128::{Hasher128 as _, SipHasher24};
use subtle::ConstantTimeEq as _;

use crate::error::ChainRefused;
use crate::types::{CallChain, ChainToken};

/// Turn number, then tag.
const TOKEN_LEN: usize = 8 + 16;
/// Tells this use of the key from any later one.
const DOMAIN: &[u8] = b"troupe.chain.v1";
const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
/// A shard's set is shrunk once it is this large and mostly empty (after a
/// burst of concurrent turns), so memory follows the turns running now.
const MIN_SHRINK_CAPACITY: usize = 1024;

/// The daemon's key and its running turns.
pub(crate) struct ChainTokens {
    key: [u8; 16],
    next: AtomicU64,
    /// Numbers of the turns running now that were issued a chain, sharded
    /// by number so concurrent turns rarely share a lock.
    live: Box<[Mutex<HashSet<u64>>]>,
}

impl std::fmt::Debug for ChainTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ChainTokens").finish_non_exhaustive()
    }
}

impl ChainTokens {
    /// A fresh key from the operating system's random source.
    pub(crate) fn new() -> Result<Self, getrandom::Error> {
        let mut key = [0u8; 16];
        getrandom::fill(&mut key)?;
        Ok(Self::with_key(key))
    }

    pub(crate) fn with_key(key: [u8; 16]) -> Self {
        Self {
            key,
            next: AtomicU64::new(1),
            live: (0..SHARDS).map(|_| Mutex::new(HashSet::new())).collect(),
        }
    }

    fn shard(&self, turn: u64) -> &Mutex<HashSet<u64>> {
        &self.live[(turn as usize) & (SHARDS - 1)]
    }

    /// Numbers a turn and counts it as running until [`ChainTokens::end`].
    pub(crate) fn begin(&self) -> NonZeroU64 {
        // Counts from 1; a daemon does not run 2^64 turns, so it never wraps.
        let turn =
            NonZeroU64::new(self.next.fetch_add(1, Ordering::Relaxed)).unwrap_or(NonZeroU64::MIN);
        self.shard(turn.get()).lock().insert(turn.get());
        turn
    }

    /// The turn ended: tokens issued to it are stale from now on.
    pub(crate) fn end(&self, turn: NonZeroU64) {
        let mut live = self.shard(turn.get()).lock();
        live.remove(&turn.get());
        if live.capacity() >= MIN_SHRINK_CAPACITY && live.len() < live.capacity() / 8 {
            let keep = live.len() * 2;
            live.shrink_to(keep);
        }
    }

    fn tag(&self, turn: u64, chain: &CallChain) -> [u8; 16] {
        let mut mac = SipHasher24::new_with_key(&self.key);
        mac.write(DOMAIN);
        mac.write(&turn.to_le_bytes());
        // Lengths first, so no two chains write the same bytes.
        let field = |mac: &mut SipHasher24, bytes: &[u8]| {
            mac.write(&(bytes.len() as u64).to_le_bytes());
            mac.write(bytes);
        };
        field(&mut mac, chain.id.as_bytes());
        mac.write(&(chain.actors.len() as u64).to_le_bytes());
        for actor in &chain.actors {
            field(&mut mac, actor.ty.as_bytes());
            field(&mut mac, actor.id.as_bytes());
        }
        mac.finish128().as_bytes()
    }

    /// Puts the token of `turn` on `chain` (the chain calls from that turn
    /// carry).
    pub(crate) fn seal(&self, turn: NonZeroU64, chain: &mut CallChain) {
        let mut token = [0u8; TOKEN_LEN];
        token[..8].copy_from_slice(&turn.get().to_le_bytes());
        token[8..].copy_from_slice(&self.tag(turn.get(), chain));
        chain.token = ChainToken::new(Bytes::copy_from_slice(&token));
    }

    /// Whether this daemon issued `chain`, as it is, to a turn still
    /// running. `max_depth` bounds the chains a turn can have been issued,
    /// so a longer one is refused before it is hashed.
    pub(crate) fn check(&self, chain: &CallChain, max_depth: usize) -> Result<(), ChainRefused> {
        let token = chain.token.as_bytes();
        if token.is_empty() {
            return Err(ChainRefused::NoToken {
                chain: describe(chain),
            });
        }
        let not_issued = || ChainRefused::NotIssued {
            chain: describe(chain),
        };
        if token.len() != TOKEN_LEN || chain.actors.len() > max_depth {
            return Err(not_issued());
        }
        let mut number = [0u8; 8];
        number.copy_from_slice(&token[..8]);
        let turn = u64::from_le_bytes(number);
        if !bool::from(self.tag(turn, chain).ct_eq(&token[8..])) {
            return Err(not_issued());
        }
        if !self.shard(turn).lock().contains(&turn) {
            return Err(ChainRefused::TurnEnded {
                chain: describe(chain),
            });
        }
        Ok(())
    }

    /// Turns with a chain running now (for tests).
    #[cfg(test)]
    fn running(&self) -> usize {
        self.live.iter().map(|s| s.lock().len()).sum()
    }
}

/// `id (a → b)`, for refusals: the chain's id and actors, never its token.
fn describe(chain: &CallChain) -> String {
    let path = chain
        .actors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" → ");
    format!("{} ({path})", chain.id)
}

#[cfg(test)]
mod tests {
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
        // Same turn number on both, so only the key differs.
        let _ = ours.begin();
        let (_, c) = issued(&theirs, &["a"]);
        assert!(matches!(
            ours.check(&c, 32),
            Err(ChainRefused::NotIssued { .. })
        ));
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
        let capacity: usize = tokens.live.iter().map(|s| s.lock().capacity()).sum();
        assert!(
            capacity < SHARDS * MIN_SHRINK_CAPACITY,
            "capacity {capacity}"
        );
    }
}
