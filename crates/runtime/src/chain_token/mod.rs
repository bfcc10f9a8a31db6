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

use std::cell::Cell;
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
/// Turn numbers a thread takes from [`NEXT_BLOCK`] at a time.
const BLOCK: u64 = 1024;

/// Turn numbers are unique in the process, not just per runtime, so a
/// thread may keep a block of them whichever runtime it numbers turns for;
/// threads starting turns at once then share no counter.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's block of turn numbers: the next one, and the end.
    static NUMBERS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A turn number no other turn in the process has had.
fn next_number() -> NonZeroU64 {
    NUMBERS.with(|numbers| {
        let (mut next, mut end) = numbers.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            end = next + BLOCK;
        }
        numbers.set((next + 1, end));
        // Counts from 1; a process does not number 2^64 turns, so no wrap.
        NonZeroU64::new(next).unwrap_or(NonZeroU64::MIN)
    })
}

/// One shard of the running turns, alone on its cache lines: neighbouring
/// numbers, started or ended on different threads, land in neighbouring
/// shards.
#[repr(align(128))]
struct Shard(Mutex<HashSet<u64>>);

/// The daemon's key and its running turns.
pub(crate) struct ChainTokens {
    key: [u8; 16],
    /// Numbers of the turns running now that were issued a chain, sharded
    /// by number so concurrent turns rarely share a lock.
    live: Box<[Shard]>,
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
            live: (0..SHARDS)
                .map(|_| Shard(Mutex::new(HashSet::new())))
                .collect(),
        }
    }

    fn shard(&self, turn: u64) -> &Mutex<HashSet<u64>> {
        // Mixing in the block keeps threads numbering turns at the same
        // pace, from their own blocks, out of each other's shards.
        let mixed = turn ^ (turn / BLOCK);
        &self.live[(mixed as usize) & (SHARDS - 1)].0
    }

    /// Numbers a turn and counts it as running until [`ChainTokens::end`].
    pub(crate) fn begin(&self) -> NonZeroU64 {
        let turn = next_number();
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
        self.live.iter().map(|s| s.0.lock().len()).sum()
    }
}

/// `id (a → b)`, for refusals: the chain's id and actors, never its token.
/// The chain for a message: its id and path, both cut short, since both
/// come from the caller and could be any length.
fn describe(chain: &CallChain) -> String {
    const ENDS: usize = 2;
    let actor =
        |a: &crate::types::ActorId| crate::error::shortened(&a.to_string(), 80).into_owned();
    let actors = &chain.actors;
    let path = if actors.len() <= 2 * ENDS {
        actors.iter().map(actor).collect::<Vec<_>>().join(" → ")
    } else {
        let (head, rest) = actors.split_at(ENDS);
        let tail = &rest[rest.len() - ENDS..];
        format!(
            "{} → … {} more → {}",
            head.iter().map(actor).collect::<Vec<_>>().join(" → "),
            actors.len() - 2 * ENDS,
            tail.iter().map(actor).collect::<Vec<_>>().join(" → "),
        )
    };
    format!("{} ({path})", crate::error::shortened(&chain.id, 64))
}

#[cfg(test)]
mod tests;
