use std::sync::Arc;

use super::*;

fn actor() -> ActorId {
    ActorId::new("bus", "b1")
}

fn event(n: u32) -> Payload {
    Payload::json(n.to_string())
}

/// The origin of an untraced turn's events that ended at `ms`.
fn at(ms: u64) -> Origin {
    Origin {
        published_unix_ms: ms,
        trace: None,
    }
}

fn ready(take: Result<Take, CallError>) -> Polled {
    match take {
        Ok(Take::Ready(polled)) => polled,
        Ok(Take::Wait(cursor, _)) => panic!("expected events, the poll would wait at {cursor}"),
        Err(e) => panic!("the poll failed: {e}"),
    }
}

/// A type poll after `after` (none: from now on) on a daemon whose type
/// never published before.
fn take_type(
    hub: &EventHub,
    watched: &WatchedType,
    after: &[Cursor],
    now: Instant,
) -> Result<Take, CallError> {
    hub.take_type(watched, &TypeFrom::after(after.to_vec()), now, || false)
}

fn numbers(polled: &Polled) -> Vec<String> {
    polled
        .events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.payload.data).into_owned())
        .collect()
}

#[test]
fn cursors_print_and_parse_back() {
    let c = Cursor {
        epoch: 0x00c0_ffee_00c0_ffee,
        seq: 42,
    };
    assert_eq!(c.to_string(), "00c0ffee00c0ffee-42");
    assert_eq!("00c0ffee00c0ffee-42".parse::<Cursor>(), Ok(c));
    for bad in [
        "",
        "zz",
        "00c0ffee-42",
        "00c0ffee00c0ffee-",
        "00c0ffee00c0ffeg-1",
    ] {
        assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
    }
}

#[test]
fn events_carry_their_turns_trace_context_to_both_streams_held_or_not() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    let type_start = ready(take_type(&hub, &WatchedType::all("bus"), &[], now));
    let traced = |span: &str| Origin {
        published_unix_ms: 5,
        trace: Some(Arc::new(EventTrace {
            traceparent: format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01"),
            tracestate: "k=v".into(),
        })),
    };
    hub.publish(
        &actor(),
        vec![event(1), event(2)],
        traced("00f067aa0ba902b7"),
    );
    hub.publish(&actor(), vec![event(3)], at(6));
    // A durable turn's events wait for its writes and keep their context.
    let Some(held) = hub.hold_until_stored(&actor(), vec![event(4)], traced("00f067aa0ba902b8"))
    else {
        panic!("the actor is watched, so its durable events are held");
    };
    held.settle(true);
    let spans = |polled: &Polled| -> Vec<Option<String>> {
        polled
            .events
            .iter()
            .map(|e| e.trace.as_ref().map(|t| t.traceparent[36..52].to_owned()))
            .collect()
    };
    let want = [
        Some("00f067aa0ba902b7".to_owned()),
        Some("00f067aa0ba902b7".to_owned()),
        None,
        Some("00f067aa0ba902b8".to_owned()),
    ];
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(spans(&polled), want);
    assert_eq!(
        polled.events[0]
            .trace
            .as_ref()
            .map(|t| t.tracestate.as_str()),
        Some("k=v")
    );
    let whole_type = ready(take_type(
        &hub,
        &WatchedType::all("bus"),
        &[type_start.cursor],
        now,
    ));
    assert_eq!(spans(&whole_type), want);
}

#[test]
fn nobody_watching_holds_nothing() {
    let hub = EventHub::new(10);
    hub.publish(&actor(), vec![event(1)], at(0));
    assert_eq!(hub.watched(), 0);
}

#[test]
fn a_watcher_gets_what_was_published_after_its_cursor_in_order() {
    let hub = EventHub::new(10);
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    assert!(start.events.is_empty() && !start.missed);
    hub.publish(&actor(), vec![event(1), event(2)], at(7));
    hub.publish(&actor(), vec![event(3)], at(8));
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(numbers(&polled), ["1", "2", "3"]);
    assert!(!polled.missed);
    assert_eq!(polled.events[2].published_unix_ms, 8);
    // Resuming after the second gets the third only.
    let second = polled.events[1].cursor;
    assert_eq!(
        numbers(&ready(hub.take(&actor(), Some(second), now))),
        ["3"]
    );
    // Up to date: the poll waits.
    assert!(matches!(
        hub.take(&actor(), Some(polled.cursor), now),
        Ok(Take::Wait(..))
    ));
}

#[test]
fn a_watcher_that_fell_behind_is_told() {
    let hub = EventHub::new(10);
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    let many: Vec<Payload> = (1..=HELD_EVENTS as u32 + 5).map(event).collect();
    hub.publish(&actor(), many, at(0));
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert!(polled.missed);
    assert_eq!(polled.events.len(), HELD_EVENTS);
    assert_eq!(numbers(&polled)[0], "6");
}

#[test]
fn a_cursor_of_another_epoch_gets_what_is_held_and_is_told() {
    let hub = EventHub::new(10);
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    hub.publish(&actor(), vec![event(1)], at(0));
    let other = Cursor {
        epoch: start.cursor.epoch ^ 1,
        seq: 0,
    };
    let polled = ready(hub.take(&actor(), Some(other), now));
    assert!(polled.missed);
    assert_eq!(numbers(&polled), ["1"]);
}

#[test]
fn the_watched_actors_are_bounded_and_stale_ones_are_forgotten() {
    let hub = EventHub::new(1);
    let now = Instant::now();
    ready(hub.take(&actor(), None, now));
    let other = ActorId::new("bus", "b2");
    assert!(matches!(
        hub.take(&other, None, now),
        Err(CallError::Overloaded(_))
    ));
    let later = now + KEPT_AFTER_LAST_POLL + SWEEP_EVERY;
    ready(hub.take(&other, None, later));
    assert_eq!(hub.watched(), 1);
}

#[test]
fn held_bytes_are_bounded_per_actor() {
    let hub = EventHub::new(10);
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    let big = Payload::json(vec![b'1'; HELD_BYTES_PER_ACTOR / 2 + 1]);
    hub.publish(&actor(), vec![big.clone(), big.clone(), big], at(0));
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(polled.events.len(), 1);
    assert!(polled.missed);
}

#[test]
fn a_durable_turns_events_wait_for_its_write_and_later_ones_wait_behind() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    let Some(first) = hub.hold_until_stored(&actor(), vec![event(1)], at(0)) else {
        panic!("a watched actor's events are queued");
    };
    // A later turn (one that read the unstored state, say) waits behind.
    hub.publish(&actor(), vec![event(2)], at(0));
    assert!(matches!(
        hub.take(&actor(), Some(start.cursor), now),
        Ok(Take::Wait(..))
    ));
    first.settle(true);
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(numbers(&polled), ["1", "2"]);
    assert!(!polled.missed);
    assert_eq!(polled.events[0].cursor.seq, start.cursor.seq + 1);
}

#[test]
fn a_write_that_fails_drops_only_its_turns_events() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    let failed = hub.hold_until_stored(&actor(), vec![event(1)], at(0));
    let stored = hub.hold_until_stored(&actor(), vec![event(2)], at(0));
    hub.publish(&actor(), vec![event(3)], at(0));
    // Settled out of order: the second waits for the first.
    if let Some(stored) = stored {
        stored.settle(true);
    }
    assert!(matches!(
        hub.take(&actor(), Some(start.cursor), now),
        Ok(Take::Wait(..))
    ));
    // A reply never answered (dropped) counts as not stored.
    drop(failed);
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(numbers(&polled), ["2", "3"]);
    assert!(!polled.missed, "a failed turn's events never happened");
}

#[test]
fn events_dropped_from_a_long_queue_are_told_as_missed() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(hub.take(&actor(), None, now));
    hub.publish(&actor(), vec![event(1)], at(0));
    let big = |n: u8| Payload::json(vec![n; HELD_BYTES_PER_ACTOR / 2 + 1]);
    let waiting = hub.hold_until_stored(&actor(), vec![big(b'2')], at(0));
    // More than the queue keeps waits behind it: the oldest, 2, goes.
    hub.publish(&actor(), vec![big(b'3')], at(0));
    drop(waiting);
    let polled = ready(hub.take(&actor(), Some(start.cursor), now));
    assert_eq!(numbers(&polled), ["1"], "events stop at the gap");
    assert!(!polled.missed);
    let after_gap = ready(hub.take(&actor(), Some(polled.cursor), now));
    assert!(after_gap.missed);
    assert_eq!(after_gap.events.len(), 1);
    assert_eq!(after_gap.events[0].cursor.seq, polled.cursor.seq + 2);
}

#[test]
fn nothing_is_queued_for_an_actor_nobody_watches() {
    let hub = Arc::new(EventHub::new(10));
    assert!(hub
        .hold_until_stored(&actor(), vec![event(1)], at(0))
        .is_none());
}

fn ty() -> WatchedType {
    WatchedType::all("bus")
}

fn ids_from(prefix: &str) -> WatchedType {
    WatchedType {
        ty: Arc::from("bus"),
        id_prefix: Arc::from(prefix),
    }
}

fn publishers(polled: &Polled) -> Vec<String> {
    polled
        .events
        .iter()
        .map(|e| e.actor.id.to_string())
        .collect()
}

#[test]
fn a_type_watcher_gets_every_actors_events_each_named() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(take_type(&hub, &ty(), &[], now));
    let b2 = ActorId::new("bus", "b2");
    hub.publish(&actor(), vec![event(1)], at(0));
    hub.publish(&b2, vec![event(2)], at(0));
    hub.publish(&ActorId::new("tram", "t1"), vec![event(9)], at(0));
    hub.publish(&actor(), vec![event(3)], at(0));
    let polled = ready(take_type(&hub, &ty(), &[start.cursor], now));
    assert_eq!(numbers(&polled), ["1", "2", "3"]);
    assert_eq!(publishers(&polled), ["b1", "b2", "b1"]);
    assert!(!polled.missed);
    // An actor watched alone too gets its own, named.
    let alone = ready(hub.take(&b2, None, now));
    hub.publish(&b2, vec![event(4)], at(0));
    let polled = ready(hub.take(&b2, Some(alone.cursor), now));
    assert_eq!(publishers(&polled), ["b2"]);
    assert_eq!(hub.watched(), 2);
}

#[test]
fn a_type_poll_resumes_after_its_own_cursor_among_others() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(take_type(&hub, &ty(), &[], now));
    hub.publish(&actor(), vec![event(1), event(2)], at(0));
    let first = ready(take_type(&hub, &ty(), &[start.cursor], now)).events[0].cursor;
    // Another daemon's cursor beside this one's: this one's counts.
    let elsewhere = Cursor {
        epoch: first.epoch ^ 1,
        seq: 7,
    };
    let polled = ready(take_type(&hub, &ty(), &[elsewhere, first], now));
    assert_eq!(numbers(&polled), ["2"]);
    assert!(!polled.missed);
    // None of them this daemon's: it sends what it holds, and says so.
    let polled = ready(take_type(&hub, &ty(), &[elsewhere], now));
    assert_eq!(numbers(&polled), ["1", "2"]);
    assert!(polled.missed);
}

#[test]
fn a_durable_turns_events_wait_for_its_write_in_its_types_stream_too() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let start = ready(take_type(&hub, &ty(), &[], now));
    let Some(held) = hub.hold_until_stored(&actor(), vec![event(1)], at(0)) else {
        panic!("an actor of a watched type has its events queued");
    };
    hub.publish(&actor(), vec![event(2)], at(0));
    // Another actor's events do not wait for this one's write.
    hub.publish(&ActorId::new("bus", "b2"), vec![event(3)], at(0));
    let polled = ready(take_type(&hub, &ty(), &[start.cursor], now));
    assert_eq!(numbers(&polled), ["3"]);
    held.settle(true);
    let polled = ready(take_type(&hub, &ty(), &[polled.cursor], now));
    assert_eq!(numbers(&polled), ["1", "2"]);
    assert!(!polled.missed);
}

#[test]
fn a_type_watch_of_an_id_prefix_gets_those_actors_only_and_waits_past_the_rest() {
    let hub = Arc::new(EventHub::new(10));
    let now = Instant::now();
    let r12 = ids_from("r12-");
    let start = ready(take_type(&hub, &r12, &[], now));
    hub.publish(&ActorId::new("bus", "r12-a"), vec![event(1)], at(0));
    hub.publish(&ActorId::new("bus", "r7-b"), vec![event(2)], at(0));
    hub.publish(&ActorId::new("bus", "r12-c"), vec![event(3)], at(0));
    let polled = ready(take_type(&hub, &r12, &[start.cursor], now));
    assert_eq!(numbers(&polled), ["1", "3"]);
    assert_eq!(publishers(&polled), ["r12-a", "r12-c"]);
    // Only another actor's event since: nothing to send, so the poll waits,
    // at a cursor past it.
    hub.publish(&ActorId::new("bus", "r7-b"), vec![event(4)], at(0));
    match take_type(&hub, &r12, &[polled.cursor], now) {
        Ok(Take::Wait(at, _)) => assert_eq!(at.seq, 4),
        Ok(Take::Ready(p)) => panic!("expected a wait, got {:?}", numbers(&p)),
        Err(e) => panic!("the poll failed: {e}"),
    }
    // A watcher of the whole type shares the stream and gets all four.
    let all = ready(take_type(&hub, &ty(), &[start.cursor], now));
    assert_eq!(numbers(&all), ["1", "2", "3", "4"]);
}

#[test]
fn a_filtered_poll_stops_at_a_gap_and_the_next_says_events_may_be_missing() {
    let now = Instant::now();
    let mut topic = Topic::new(TYPE_BOUNDS, now);
    let mut bytes = 0;
    let r12 = ids_from("r12-");
    let wants = |a: &ActorId| r12.wants(a);
    let Take::Ready(start) = topic.take(Publisher::Held(&wants), From::Now, now) else {
        panic!("a new watch starts at once");
    };
    let (mine, other) = (ActorId::new("bus", "r12-a"), ActorId::new("bus", "r7-b"));
    topic.append(&mut bytes, Some(&other), &[event(1)], &at(0));
    // An event dropped unheld (it waited behind a durable write too long).
    topic.skip(1);
    topic.append(&mut bytes, Some(&mine), &[event(3)], &at(0));
    let Take::Ready(before_gap) =
        topic.take(Publisher::Held(&wants), From::After(start.cursor), now)
    else {
        panic!("a poll stopped at a gap answers at once");
    };
    assert!(before_gap.events.is_empty() && !before_gap.missed);
    assert_eq!(before_gap.cursor.seq, 1);
    let Take::Ready(after_gap) =
        topic.take(Publisher::Held(&wants), From::After(before_gap.cursor), now)
    else {
        panic!("events wait past the gap");
    };
    assert_eq!(numbers(&after_gap), ["3"]);
    assert!(after_gap.missed);
}

#[test]
fn a_new_host_poll_begins_now_and_reads_whether_the_type_published_once_held() {
    let hub = EventHub::new(10);
    let now = Instant::now();
    let mut held_when_read = None;
    let first = ready(hub.take_type(&ty(), &TypeFrom::NewHost, now, || {
        // Read once the type's events are held, so that a turn ending
        // after the read delivers to the watcher.
        held_when_read = Some(hub.watched.load(Ordering::SeqCst));
        false
    }));
    assert_eq!(held_when_read, Some(1));
    assert!(first.events.is_empty() && !first.missed);
    hub.publish(&actor(), vec![event(1)], at(0));
    let next = ready(take_type(&hub, &ty(), &[first.cursor], now));
    assert_eq!((numbers(&next), next.missed), (vec!["1".to_owned()], false));

    let other = EventHub::new(10);
    let published_before = ready(other.take_type(&ty(), &TypeFrom::NewHost, now, || true));
    assert!(published_before.events.is_empty() && published_before.missed);
}
