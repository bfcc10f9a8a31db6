//! Which actors are active on this daemon: a sharded hash table from
//! (type, id) to activation.
//!
//! The table stores only the `Arc<Activation>` (the id lives inside it), so
//! a slot costs one pointer. Shards keep writers for unrelated actors apart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::RwLock;

use crate::activation::Activation;
use crate::shards::{shard_of, shrink_if_sparse, SHARDS};
use crate::types::ActorId;

pub(crate) struct Directory {
    hasher: DefaultHashBuilder,
    shards: Box<[RwLock<HashTable<Arc<Activation>>>]>,
    /// Activations in all shards: read without taking any shard's lock,
    /// also from inside one (an activation being created).
    count: AtomicUsize,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("shards", &SHARDS)
            .finish()
    }
}

impl Directory {
    pub(crate) fn new() -> Self {
        Self {
            hasher: DefaultHashBuilder::default(),
            shards: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            count: AtomicUsize::new(0),
        }
    }

    fn hash(&self, ty: &str, id: &str) -> u64 {
        ActorId::hash_parts(&self.hasher, ty, id)
    }

    fn shard(&self, hash: u64) -> &RwLock<HashTable<Arc<Activation>>> {
        &self.shards[shard_of(hash)]
    }

    pub(crate) fn get(&self, id: &ActorId) -> Option<Arc<Activation>> {
        let hash = self.hash(&id.ty, &id.id);
        self.shard(hash).read().find(hash, |a| a.id == *id).cloned()
    }

    /// The activation for `id`, creating it with `create` when there is none.
    /// `create` may refuse (unknown type), in which case nothing is inserted.
    pub(crate) fn get_or_create<E>(
        &self,
        id: &ActorId,
        create: impl FnOnce() -> Result<Activation, E>,
    ) -> Result<Arc<Activation>, E> {
        let hash = self.hash(&id.ty, &id.id);
        let shard = self.shard(hash);
        if let Some(a) = shard.read().find(hash, |a| a.id == *id) {
            return Ok(a.clone());
        }
        let mut table = shard.write();
        if let Some(a) = table.find(hash, |a| a.id == *id) {
            return Ok(a.clone());
        }
        let act = Arc::new(create()?);
        let hasher = &self.hasher;
        table.insert_unique(hash, act.clone(), |a| {
            ActorId::hash_parts(hasher, &a.id.ty, &a.id.id)
        });
        self.count.fetch_add(1, Ordering::Relaxed);
        Ok(act)
    }

    /// Removes `act` if `still_removable` agrees while both the shard and the
    /// activation are locked, so no sender can slip a call in between.
    pub(crate) fn remove_if(
        &self,
        act: &Arc<Activation>,
        still_removable: impl FnOnce(&mut crate::activation::Inner) -> bool,
    ) -> bool {
        let hash = self.hash(&act.id.ty, &act.id.id);
        let mut table = self.shard(hash).write();
        let mut inner = act.inner.lock();
        if !still_removable(&mut inner) {
            return false;
        }
        inner.status = crate::activation::Status::Gone;
        drop(inner);
        if let Ok(entry) = table.find_entry(hash, |a| Arc::ptr_eq(a, act)) {
            entry.remove();
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        let hasher = &self.hasher;
        shrink_if_sparse(&mut table, |a| {
            ActorId::hash_parts(hasher, &a.id.ty, &a.id.id)
        });
        true
    }

    /// Every activation, one shard at a time (no global lock).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<Activation>)) {
        for shard in self.shards.iter() {
            for act in shard.read().iter() {
                f(act);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}
