//! Reminder records: what is stored for each kind and how it reads back.

use super::*;

#[test]
fn calendar_schedules_are_stored_short_and_read_back_whole() {
    let berlin = CronSchedule {
        pattern: "0 9 * * MON-FRI".into(),
        time_zone: "Europe/Berlin".into(),
    };
    let utc = CronSchedule {
        pattern: "@daily".into(),
        time_zone: "UTC".into(),
    };
    let payload = Payload {
        data: Bytes::new(),
        content_type: ContentType::Json,
    };
    for (schedule, stored) in [
        (&berlin, r#""c":"0 9 * * MON-FRI","z":"Europe/Berlin"}"#),
        (&utc, r#""c":"@daily"}"#),
    ] {
        let data = encode(&meta_with(|m| m.set_cron(Some(schedule))), &payload);
        let text = String::from_utf8_lossy(&data[4..]).into_owned();
        assert!(text.ends_with(stored), "{text}");
        let Some((meta, _)) = decode(&data) else {
            panic!("a calendar record does not decode");
        };
        assert_eq!(meta.cron_schedule().as_ref(), Some(schedule));
    }
}

#[test]
fn records_are_compact_and_those_with_full_names_still_read() {
    let meta = meta_with(|m| m.bytes = true);
    let payload = Payload {
        data: Bytes::from_static(b"p"),
        content_type: ContentType::Bytes,
    };
    let data = encode(&meta, &payload);
    assert_eq!(
        &data[4..data.len() - 1],
        br#"{"b":true,"m":3,"i":1000,"x":60000}"#
    );
    let Some((decoded, back)) = decode(&data) else {
        panic!("a record this version wrote does not decode");
    };
    assert_eq!((decoded.max_attempts, decoded.bytes), (3, true));
    assert_eq!(back.data, payload.data);

    // As the previous version wrote it: every field, full names.
    let old = br#"{"period_ms":500,"remaining":2,"until_unix_ms":null,"bytes":false,"max_attempts":3,"initial_backoff_ms":1000,"max_backoff_ms":60000,"skip_missed":true,"attempts":1,"fired":7}"#;
    let mut data = (old.len() as u32).to_le_bytes().to_vec();
    data.extend_from_slice(old);
    data.extend_from_slice(b"{}");
    let Some((meta, payload)) = decode(&Bytes::from(data)) else {
        panic!("a record with full names does not decode");
    };
    assert_eq!(
        (
            meta.period_ms,
            meta.remaining,
            meta.skip_missed,
            meta.attempts,
            meta.fired
        ),
        (500, Some(2), true, 1, 7)
    );
    assert_eq!(payload.content_type, ContentType::Json);
    assert_eq!(payload.data, Bytes::from_static(b"{}"));
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let p = RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(150),
    };
    assert_eq!(p.backoff(1), Duration::from_millis(50));
    assert_eq!(p.backoff(2), Duration::from_millis(100));
    assert_eq!(p.backoff(3), Duration::from_millis(150));
}

#[test]
fn records_round_trip() {
    let meta = Meta {
        period_ms: 5,
        remaining: None,
        until_unix_ms: Some(9),
        bytes: true,
        max_attempts: 2,
        initial_backoff_ms: 1,
        max_backoff_ms: 2,
        skip_missed: true,
        attempts: 1,
        fired: 3,
        cron: None,
        time_zone: None,
        jitter_ms: 0,
        delay_ms: 0,
        paused_due_ms: None,
        tell: None,
    };
    let payload = Payload {
        data: Bytes::from_static(b"\x00\x01"),
        content_type: ContentType::Bytes,
    };
    let (m, p) = decode(&encode(&meta, &payload)).unwrap_or_else(|| panic!("decodes"));
    assert_eq!(m.fired, 3);
    assert_eq!(p, payload);
}

#[test]
fn a_delayed_tell_keeps_its_call_and_plain_records_stay_short() {
    let tell = TellMeta {
        method: "ship".into(),
        metadata: vec![("traceparent".into(), "00-ab".into())],
        key: "order-7".into(),
        key_retention_ms: Some(60_000),
    };
    let meta = meta_with(|m| m.tell = Some(tell.clone()));
    let (read, _) =
        decode(&encode(&meta, &Payload::default())).unwrap_or_else(|| panic!("decodes"));
    assert_eq!(read.tell, Some(tell));
    let plain = encode(&meta_with(|_| ()), &Payload::default());
    assert!(!plain.windows(3).any(|w| w == b"\"t\""));
}
