//! The server side of the replicas' Raft RPCs (`network` is the client):
//! openraft's request and answer travel as JSON in a `RaftMessage`.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Status;
use troupe_proto::v1 as pb;

use super::PlacementService;
use crate::network::{APPEND_ENTRIES, INSTALL_SNAPSHOT, VOTE};
use crate::TypeConfig;

impl PlacementService {
    pub(super) async fn handle_raft(
        &self,
        msg: pb::RaftMessage,
    ) -> Result<pb::RaftMessage, Status> {
        let raft = &self.inner.raft;
        let json = match msg.kind.as_str() {
            APPEND_ENTRIES => {
                let req: AppendEntriesRequest<TypeConfig> = decode(&msg)?;
                encode(&raft.append_entries(req).await)?
            }
            VOTE => {
                let req: VoteRequest<u64> = decode(&msg)?;
                encode(&raft.vote(req).await)?
            }
            INSTALL_SNAPSHOT => {
                let req: InstallSnapshotRequest<TypeConfig> = decode(&msg)?;
                encode(&raft.install_snapshot(req).await)?
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown Raft message kind {other:?}; run the same troupe version on every \
                     placement replica"
                )))
            }
        };
        Ok(pb::RaftMessage {
            kind: msg.kind,
            json: json.into(),
        })
    }
}

fn decode<T: DeserializeOwned>(msg: &pb::RaftMessage) -> Result<T, Status> {
    serde_json::from_slice(&msg.json).map_err(|e| {
        Status::invalid_argument(format!(
            "Raft message {:?} is not valid ({e}); run the same troupe version on every placement \
             replica",
            msg.kind
        ))
    })
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(format!("encoding a Raft answer: {e}")))
}
