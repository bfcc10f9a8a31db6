//! The seed step: `TROUPE_FUZZ_SEEDS=DIR target` writes the target's seed
//! inputs (valid requests and streams, encoded as the daemon reads them)
//! into DIR and exits, so a fresh corpus starts from real shapes instead
//! of empty input. `bench/fuzz.sh` runs it before each target.

use std::path::Path;

/// The variable naming the directory to write seeds into.
pub const SEEDS_VAR: &str = "TROUPE_FUZZ_SEEDS";

/// Called from each target's `init`: writes `seeds` and exits if asked to.
pub fn write_if_asked(seeds: fn() -> Vec<Vec<u8>>) {
    let Some(dir) = std::env::var_os(SEEDS_VAR) else {
        return;
    };
    let dir = Path::new(&dir);
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        for (n, seed) in seeds().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{n:02}")), seed)?;
        }
        Ok(())
    });
    match written {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("cannot write seeds into {}: {e}", dir.display());
            std::process::exit(2)
        }
    }
}
