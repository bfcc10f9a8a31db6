//! The memory bounds' settings: the idempotency records' bound, the
//! activation bound, sled's cache and load shedding, from the flags, the
//! file and the memory limit.

use super::*;

#[test]
fn the_idempotency_memory_bound_comes_from_the_flag_or_the_file_and_is_not_zero(
) -> anyhow::Result<()> {
    let cfg = ServeArgs::default().resolve_under(None)?;
    assert_eq!(cfg.runtime.idempotency_memory_bytes, 64 << 20);
    // Under a memory limit, an eighth of it; the flag still decides.
    let cfg = ServeArgs::default().resolve_under(Some(128 << 20))?;
    assert_eq!(cfg.runtime.idempotency_memory_bytes, 16 << 20);
    let flag = serve_flags(&["--idempotency-memory-bytes", "1048576"])?;
    assert_eq!(
        flag.resolve_under(None)?.runtime.idempotency_memory_bytes,
        1 << 20
    );
    let cfg = flag.resolve_under(Some(64 << 30))?;
    assert_eq!(cfg.runtime.idempotency_memory_bytes, 1 << 20);
    let cfg = from_file("idempotency_memory_bytes = 2097152\n")?;
    assert_eq!(cfg.runtime.idempotency_memory_bytes, 2 << 20);
    let Err(e) = serve_flags(&["--idempotency-memory-bytes", "0"])?.resolve() else {
        anyhow::bail!("a bound of 0 bytes was accepted");
    };
    let said = format!("{e:#}");
    assert!(said.contains("--idempotency-memory-bytes"), "{said}");
    Ok(())
}

#[test]
fn the_activation_bound_is_off_unless_set_and_not_zero() -> anyhow::Result<()> {
    assert_eq!(
        ServeArgs::default().resolve()?.runtime.max_activations,
        None
    );
    let cfg = serve_flags(&["--max-activations", "100000"])?.resolve()?;
    assert_eq!(cfg.runtime.max_activations, Some(100_000));
    let cfg = from_file("max_activations = 5000\n")?;
    assert_eq!(cfg.runtime.max_activations, Some(5_000));
    let Err(e) = serve_flags(&["--max-activations", "0"])?.resolve() else {
        anyhow::bail!("a bound of 0 activations was accepted");
    };
    let said = format!("{e:#}");
    assert!(said.contains("--max-activations"), "{said}");
    Ok(())
}

#[test]
fn the_sled_cache_comes_from_the_flag_or_the_file_and_must_be_usable() -> anyhow::Result<()> {
    let cfg = ServeArgs::default().resolve_under(None)?;
    assert_eq!(
        cfg.sled_cache_bytes,
        troupe_storage_sled::DEFAULT_CACHE_BYTES
    );
    // Under a memory limit, an eighth of it; the flag still decides.
    let cfg = ServeArgs::default().resolve_under(Some(128 << 20))?;
    assert_eq!(cfg.sled_cache_bytes, 16 << 20);
    assert_eq!(cfg.memory_limit, Some(128 << 20));
    let flag = serve_flags(&["--sled-cache-bytes", "67108864"])?;
    assert_eq!(flag.resolve_under(None)?.sled_cache_bytes, 64 << 20);
    assert_eq!(
        flag.resolve_under(Some(128 << 20))?.sled_cache_bytes,
        64 << 20
    );
    assert_eq!(
        from_file("sled_cache_bytes = 33554432\n")?.sled_cache_bytes,
        32 << 20
    );
    let Err(e) = serve_flags(&["--sled-cache-bytes", "1024"])?.resolve() else {
        anyhow::bail!("a 1 KiB sled cache was accepted");
    };
    let said = e.to_string();
    assert!(
        said.contains("--sled-cache-bytes 1024 is too small"),
        "{said}"
    );
    assert!(said.contains("at least 4194304"), "{said}");
    assert!(serve_flags(&["--sled-cache-bytes", "lots"]).is_err());
    Ok(())
}

#[test]
fn load_is_shed_near_a_memory_limit_unless_turned_off() -> anyhow::Result<()> {
    use troupe_runtime::MemoryShedding;
    let limit = Some(256 << 20);
    // No limit: nothing to measure against.
    assert_eq!(
        ServeArgs::default()
            .resolve_under(None)?
            .runtime
            .memory_shedding,
        None
    );
    assert_eq!(
        ServeArgs::default()
            .resolve_under(limit)?
            .runtime
            .memory_shedding,
        Some(MemoryShedding {
            limit_bytes: 256 << 20,
            percent: 80
        })
    );
    let flag = serve_flags(&["--memory-shed-percent", "75"])?.resolve_under(limit)?;
    assert_eq!(flag.runtime.memory_shedding.map(|s| s.percent), Some(75));
    let off = serve_flags(&["--memory-shed-percent", "0"])?.resolve_under(limit)?;
    assert_eq!(off.runtime.memory_shedding, None);
    let file = with_file("memory_shed_percent = 70\n", |args| {
        args.resolve_under(limit)
    })?;
    assert_eq!(file.runtime.memory_shedding.map(|s| s.percent), Some(70));
    let Err(e) = serve_flags(&["--memory-shed-percent", "101"])?.resolve_under(limit) else {
        anyhow::bail!("a threshold of 101% was accepted");
    };
    let said = format!("{e:#}");
    assert!(said.contains("--memory-shed-percent"), "{said}");
    Ok(())
}
