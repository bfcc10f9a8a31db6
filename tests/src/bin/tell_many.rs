//! Activates many actors at once for benchmarks: one `Tell` to each of N
//! actors of a type, a bounded number in flight.
//!
//! `tell_many ADDR TYPE N [IN_FLIGHT]` — prints how long the tells took.

use std::time::Instant;

use tokio::task::JoinSet;
use troupe_proto::v1 as pb;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: tell_many ADDR TYPE N [IN_FLIGHT]";
    let addr = args.next().ok_or(usage)?;
    let actor_type = args.next().ok_or(usage)?;
    let n: usize = args.next().ok_or(usage)?.parse()?;
    let in_flight: usize = args.next().map_or(Ok(256), |s| s.parse())?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let client = pb::actor_client_client::ActorClientClient::new(channel);
    let started = Instant::now();
    let mut running = JoinSet::new();
    let mut failed = 0usize;
    for i in 0..n {
        // Bounded: at most `in_flight` tells wait for their answer.
        while running.len() >= in_flight.max(1) {
            if let Some(done) = running.join_next().await {
                failed += usize::from(!matches!(done, Ok(Ok(_))));
            }
        }
        let mut client = client.clone();
        let request = pb::TellRequest {
            actor: Some(pb::ActorRef {
                r#type: actor_type.clone(),
                id: format!("a-{i}"),
            }),
            method: "incr".into(),
            ..Default::default()
        };
        running.spawn(async move { client.tell(request).await });
    }
    while let Some(done) = running.join_next().await {
        failed += usize::from(!matches!(done, Ok(Ok(_))));
    }
    let took = started.elapsed();
    println!(
        "told {n} actors in {:.2} s ({:.0}/s), {failed} failed",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64().max(1e-9)
    );
    if failed > 0 {
        return Err(format!("{failed} tells failed").into());
    }
    Ok(())
}
