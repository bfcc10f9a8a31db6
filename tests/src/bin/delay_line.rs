//! The latency of `bench/transport.sh`'s emulated WAN, in the kernel's
//! forwarding path: holds every packet that netfilter queues to it (an
//! iptables `NFQUEUE` rule in the router namespace) for a fixed time, then
//! lets it go, in order. The kernel here has no netem, and a proxy's latency
//! is invisible to TCP: with toxiproxy alone, the connections crossing the
//! link measured a 1–5 ms round trip at an emulated 20 ms, so their
//! congestion control and windows behaved as on a short path.
//!
//! `delay_line --delay-ms MS --queue N [--queue M ...]`, one thread per
//! queue; it runs until killed. Only the packets' metadata crosses to this
//! process (the verdict refers to the packet by id), and segmentation-offload
//! packets stay whole, so a 1 Gbit/s link is a few thousand verdicts a second.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nfq::{Message, Queue, Verdict};

/// Packets one queue may hold in the kernel before it drops more: far above
/// what 1 Gbit/s puts in flight in a 20 ms round trip, so the delay line
/// never stands in for the link's own (small) queue.
const KERNEL_QUEUE_PACKETS: u32 = 65_536;

/// The longest nap while packets are held: how late a packet that arrives
/// during it can be read, hence how much later than the delay it can leave.
const NAP: Duration = Duration::from_micros(100);

fn main() -> Result<()> {
    let (delay, queues) = parse_args(std::env::args().skip(1))?;
    let holders: Vec<_> = queues
        .into_iter()
        .map(|num| thread::spawn(move || hold(num, delay).with_context(|| format!("queue {num}"))))
        .collect();
    for holder in holders {
        match holder.join() {
            Ok(result) => result?,
            Err(_) => bail!("a queue's thread panicked"),
        }
    }
    Ok(())
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(Duration, Vec<u16>)> {
    const USAGE: &str = "usage: delay_line --delay-ms MS --queue N [--queue M ...]";
    let (mut delay, mut queues) = (None, Vec::new());
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--delay-ms" => {
                let ms: f64 = value
                    .parse()
                    .with_context(|| format!("--delay-ms {value}: not a number of ms"))?;
                delay = Some(
                    Duration::try_from_secs_f64(ms / 1000.0)
                        .with_context(|| format!("--delay-ms {value}: not a duration"))?,
                );
            }
            "--queue" => queues.push(
                value
                    .parse()
                    .with_context(|| format!("--queue {value}: not a queue number (0-65535)"))?,
            ),
            _ => bail!("unknown flag {flag}; {USAGE}"),
        }
    }
    match (delay, queues.is_empty()) {
        (Some(delay), false) => Ok((delay, queues)),
        _ => bail!("{USAGE}"),
    }
}

/// Holds queue `num`'s packets for `delay` each, forever.
fn hold(num: u16, delay: Duration) -> Result<()> {
    let mut queue =
        Queue::open().context("opening a netfilter queue socket (needs CAP_NET_ADMIN)")?;
    queue.bind(num).context("binding the queue")?;
    queue
        .set_copy_range(num, 0)
        .context("asking for metadata only")?;
    queue
        .set_recv_gso(num, true)
        .context("taking offloaded packets whole")?;
    queue
        .set_queue_max_len(num, KERNEL_QUEUE_PACKETS)
        .context("sizing the kernel's queue")?;
    let mut held: VecDeque<(Instant, Message)> = VecDeque::new();
    loop {
        // Nothing held: sleep in the kernel until a packet comes.
        queue.set_nonblocking(!held.is_empty());
        loop {
            match queue.recv() {
                Ok(message) => {
                    let now = Instant::now();
                    held.push_back((now.checked_add(delay).unwrap_or(now), message));
                    queue.set_nonblocking(true);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading the queue"),
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            let Some((_, mut message)) = held.pop_front() else {
                break;
            };
            message.set_verdict(Verdict::Accept);
            queue.verdict(message).context("releasing a packet")?;
        }
        if let Some((due, _)) = held.front() {
            thread::sleep(due.saturating_duration_since(now).min(NAP));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        line.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn the_delay_and_every_queue_are_taken() -> Result<()> {
        let (delay, queues) = parse_args(args("--queue 0 --delay-ms 10.5 --queue 1"))?;
        assert_eq!(delay, Duration::from_micros(10_500));
        assert_eq!(queues, vec![0, 1]);
        Ok(())
    }

    #[test]
    fn a_missing_or_malformed_flag_is_refused() {
        for line in [
            "--delay-ms 10",
            "--queue 0",
            "--delay-ms -1 --queue 0",
            "--delay-ms 10 --queue 70000",
            "--delay-ms 10 --queue",
            "--rtt 20 --queue 0",
        ] {
            assert!(parse_args(args(line)).is_err(), "{line} was taken");
        }
    }
}
