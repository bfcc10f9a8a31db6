//! `troupe.v1.Admin`: what operators and the CLI inspect.

use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{ActorId, Runtime};

use crate::convert;

#[derive(Debug, Clone)]
pub struct AdminApi {
    runtime: Runtime,
}

impl AdminApi {
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime }
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminApi {
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let s = self.runtime.status();
        Ok(Response::new(pb::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_ms: s.uptime.as_millis() as u64,
            types: s
                .types
                .into_iter()
                .map(|(name, apps, active)| pb::RegisteredType {
                    name,
                    apps,
                    active_actors: active as u64,
                })
                .collect(),
            store: s.store,
            active_actors: s.active_actors as u64,
            dirty_actors: s.dirty_actors as u64,
        }))
    }

    async fn list_actors(
        &self,
        request: Request<pb::ListActorsRequest>,
    ) -> Result<Response<pb::ListActorsResponse>, Status> {
        let r = request.into_inner();
        let after =
            convert::parse_page_token::<2>(&r.page_token)?.map(|[ty, id]| ActorId::new(ty, id));
        let size = convert::page_size(r.page_size);
        let ty = (!r.r#type.is_empty()).then_some(r.r#type.as_str());
        // One extra tells whether another page follows.
        let mut actors = self.runtime.list_actors(ty, after.as_ref(), size + 1);
        let next_page_token = if actors.len() > size {
            actors.truncate(size);
            actors
                .last()
                .map(|a| convert::page_token(&[&a.actor.ty, &a.actor.id]))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListActorsResponse {
            actors: actors
                .into_iter()
                .map(|a| pb::ActorInfo {
                    actor: Some(convert::actor_ref(&a.actor)),
                    mailbox_depth: a.mailbox_depth as u64,
                    turns: a.turns,
                    dirty: a.dirty,
                    idle_ms: a.idle.as_millis() as u64,
                })
                .collect(),
            next_page_token,
        }))
    }
}
