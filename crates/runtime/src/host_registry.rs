//! Which hosts serve which actor types, and the options each type runs with.
//!
//! A type stays known after its last host leaves, so calls for it wait
//! (bounded) for an app to come back instead of failing as unknown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::config::RuntimeConfig;
use crate::dispatch::pending::PendingCalls;
use crate::error::CallError;
use crate::host::ActorHost;
use crate::inbox::stats::{InboxCounters, InboxStats};
use crate::metrics::{Metrics, TypeStats};
use crate::types::{TypeOptions, TypeSpec};
use crate::validate;
use crate::watch::PublishedFlag;

/// Most actor types one registration may list: the daemon answers a
/// registration with every type's options, and that answer must fit the
/// app stream's message limit.
pub const MAX_TYPES_PER_REGISTRATION: usize = 1000;

/// One host serving one type: what an activation is bound to.
pub(crate) struct Binding {
    pub(crate) host_id: u64,
    pub(crate) host: Arc<dyn ActorHost>,
    pub(crate) options: Arc<TypeOptions>,
    /// The type's bound on calls queued or running (shared by its hosts).
    pub(crate) pending: &'static PendingCalls,
    /// The type's metric handles, when metrics are on.
    pub(crate) stats: Option<Arc<TypeStats>>,
    /// The type's durable-tell counters (always on).
    pub(crate) inbox: &'static InboxCounters,
    /// Marked by the type's first turn that publishes events here.
    pub(crate) published: &'static PublishedFlag,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("host_id", &self.host_id)
            .field("host", &self.host.name())
            .field("type", &self.options.name)
            .finish()
    }
}

#[derive(Debug)]
struct TypeSlot {
    options: Arc<TypeOptions>,
    bindings: Vec<Arc<Binding>>,
    /// Kept for the life of the process once a type is known: one small
    /// counter per distinct type name.
    pending: &'static PendingCalls,
    /// Whether any of its turns published events here, for as long.
    published: &'static PublishedFlag,
    /// Round-robin position for spreading new activations over hosts.
    next: usize,
}

/// What a host got when it registered.
#[derive(Debug, Clone)]
pub struct HostRegistration {
    pub host_id: u64,
    pub types: Vec<Arc<TypeOptions>>,
}

#[derive(Debug)]
pub(crate) struct HostRegistry {
    types: RwLock<HashMap<Arc<str>, TypeSlot>>,
    /// Bumped on every registration so waiting activations look again.
    generation: watch::Sender<u64>,
    next_host_id: AtomicU64,
    /// Where bindings find their type's durable-tell counters.
    inbox: Arc<InboxStats>,
}

impl HostRegistry {
    pub(crate) fn new(inbox: Arc<InboxStats>) -> Self {
        Self {
            types: RwLock::new(HashMap::new()),
            generation: watch::Sender::new(0),
            next_host_id: AtomicU64::new(1),
            inbox,
        }
    }

    pub(crate) fn register(
        &self,
        host: Arc<dyn ActorHost>,
        specs: Vec<TypeSpec>,
        config: &RuntimeConfig,
        metrics: Option<&Metrics>,
    ) -> Result<HostRegistration, CallError> {
        if specs.is_empty() {
            return Err(CallError::InvalidArgument(
                "registration lists no actor types; register at least one".into(),
            ));
        }
        if specs.len() > MAX_TYPES_PER_REGISTRATION {
            return Err(CallError::InvalidArgument(format!(
                "registration lists {} actor types, more than the {MAX_TYPES_PER_REGISTRATION} \
                 one app may register; split them across apps",
                specs.len()
            )));
        }
        let mut resolved = Vec::with_capacity(specs.len());
        for spec in &specs {
            validate::name("actor type", &spec.name)?;
            for method in &spec.readonly_methods {
                validate::name(
                    &format!(
                        "a read-only method (readonly_methods) of actor type '{}'",
                        spec.name
                    ),
                    method,
                )?;
            }
            if resolved.iter().any(|o: &TypeOptions| *o.name == *spec.name) {
                return Err(CallError::InvalidArgument(format!(
                    "actor type '{}' is listed twice in one registration",
                    spec.name
                )));
            }
            resolved.push(config.resolve(spec)?);
        }
        let host_id = self.next_host_id.fetch_add(1, Ordering::Relaxed);
        let mut types = self.types.write();
        // Check every type before changing any, so a refused registration
        // leaves nothing behind.
        for options in &resolved {
            if let Some(slot) = types.get(&*options.name) {
                if !slot.bindings.is_empty() && *slot.options != *options {
                    return Err(CallError::InvalidArgument(format!(
                        "actor type '{}' is already hosted by app '{}' with different options \
                         ({:?}); register it with the same options or stop that app first",
                        options.name,
                        slot.bindings[0].host.name(),
                        slot.options
                    )));
                }
            }
        }
        let mut out = Vec::with_capacity(resolved.len());
        for options in resolved {
            let options = Arc::new(options);
            let slot = types
                .entry(options.name.clone())
                .or_insert_with(|| TypeSlot {
                    options: options.clone(),
                    bindings: Vec::new(),
                    pending: PendingCalls::new(options.max_pending_calls),
                    published: Box::leak(Box::default()),
                    next: 0,
                });
            // With no live host the new registration's options take over.
            slot.options = options.clone();
            slot.pending.set_limit(options.max_pending_calls);
            slot.bindings.push(Arc::new(Binding {
                host_id,
                host: host.clone(),
                options: options.clone(),
                pending: slot.pending,
                stats: metrics.map(|m| m.for_type(&options.name)),
                inbox: self.inbox.for_type(&options.name),
                published: slot.published,
            }));
            out.push(options);
        }
        drop(types);
        self.generation.send_modify(|g| *g += 1);
        Ok(HostRegistration {
            host_id,
            types: out,
        })
    }

    pub(crate) fn unregister(&self, host_id: u64) {
        let mut types = self.types.write();
        for slot in types.values_mut() {
            slot.bindings.retain(|b| b.host_id != host_id);
        }
    }

    /// The bound on calls of a type, if any host ever registered it.
    pub(crate) fn pending_of(&self, ty: &str) -> Option<&'static PendingCalls> {
        self.types.read().get(ty).map(|s| s.pending)
    }

    /// Options of a type, if any host ever registered it.
    pub(crate) fn options(&self, ty: &str) -> Option<Arc<TypeOptions>> {
        self.types.read().get(ty).map(|s| s.options.clone())
    }

    /// Whether the actors of `ty` ever published events on this daemon.
    pub(crate) fn published_events(&self, ty: &str) -> bool {
        self.types
            .read()
            .get(ty)
            .is_some_and(|slot| slot.published.get())
    }

    /// A host for a new activation of `ty`, spreading activations over hosts.
    pub(crate) fn pick(&self, ty: &str) -> Option<Arc<Binding>> {
        let mut types = self.types.write();
        let slot = types.get_mut(ty)?;
        if slot.bindings.is_empty() {
            return None;
        }
        slot.next = (slot.next + 1) % slot.bindings.len();
        Some(slot.bindings[slot.next].clone())
    }

    /// Waits until a host for `ty` registers, at most until `deadline`.
    pub(crate) async fn wait_for(
        &self,
        ty: &str,
        deadline: tokio::time::Instant,
    ) -> Option<Arc<Binding>> {
        let mut generation = self.generation.subscribe();
        loop {
            // Mark the current generation seen before looking, so a
            // registration between the look and the wait is not missed.
            generation.borrow_and_update();
            if let Some(b) = self.pick(ty) {
                return Some(b);
            }
            match tokio::time::timeout_at(deadline, generation.changed()).await {
                Ok(Ok(())) => continue,
                _ => return None,
            }
        }
    }

    /// Changes whenever a host registers.
    pub(crate) fn registrations(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub(crate) fn for_each_options(&self, mut f: impl FnMut(&TypeOptions)) {
        for slot in self.types.read().values() {
            f(&slot.options);
        }
    }

    /// Types that have a live host, sorted, for error messages and status.
    pub(crate) fn hosted_types(&self) -> Vec<(String, Vec<String>)> {
        self.types_with_apps(false)
    }

    /// Every type ever registered, with the apps hosting it now (none while
    /// its app is away), sorted.
    pub(crate) fn known_types(&self) -> Vec<(String, Vec<String>)> {
        self.types_with_apps(true)
    }

    fn types_with_apps(&self, with_unhosted: bool) -> Vec<(String, Vec<String>)> {
        let types = self.types.read();
        let mut out: Vec<(String, Vec<String>)> = types
            .iter()
            .filter(|(_, s)| with_unhosted || !s.bindings.is_empty())
            .map(|(name, s)| {
                (
                    name.to_string(),
                    s.bindings
                        .iter()
                        .map(|b| b.host.name().to_owned())
                        .collect(),
                )
            })
            .collect();
        out.sort();
        out
    }
}
