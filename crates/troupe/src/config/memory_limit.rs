//! The memory limit the daemon runs under — its cgroup's, as a container
//! runtime, Kubernetes or a systemd unit sets it — and the defaults of the
//! memory bounds that follow from it. Sized for a host, the defaults (sled's
//! cache and the idempotency records' bound) could take a sidecar past a
//! small limit, and the kernel would kill it; under a limit they shrink to a
//! share of it. Flags and the config file still override them. They bound
//! the daemon's own structures and sled's cache, not all of sled's memory,
//! which grows with the call records the store keeps (docs/delivery.md).
//!
//! The limit is read as a cgroup-aware runtime reads it: `/proc/self/cgroup`
//! names the process's cgroup, `/proc/self/mountinfo` where that hierarchy is
//! mounted (a container sees only its own subtree), and the tightest of
//! `memory.max` (cgroup v2) or `memory.limit_in_bytes` (v1) on the way from
//! that cgroup up to the mount's root is the limit. Parsing is kept apart
//! from reading, so the tests give it the files of each layout.

use std::path::{Path, PathBuf};

/// A v1 limit this large means none: the kernel reports "unlimited" as the
/// largest page-aligned signed 64-bit value.
const V1_UNLIMITED: u64 = 1 << 62;

/// Shares of the limit the bounds default to, at most their host defaults.
/// sled's cache counts pages as they are on disk; in memory they take more,
/// and sled keeps more than its cache for a store of many small records
/// (sled issues #986 and #1093). Under 64 callers of keyed calls on sled
/// with a 256 MiB limit, the kernel killed the daemon after 580,000 calls
/// with a quarter of it as cache, 700,000 with an eighth, 850,000 with a
/// sixteenth; an eighth keeps a useful cache for state reads.
const SLED_CACHE_SHARE: u64 = 8;
const RECORDS_SHARE: u64 = 8;
/// The share of the limit (percent) from which new work is refused
/// (`--memory-shed-percent`). The rest is room for the page cache sled
/// reads its files through, and memory still grows a little while
/// shedding. Under 64 callers of keyed calls on sled in a 256 MiB cgroup
/// (`LIMIT_MB=256 bench/keyed_memory.sh`), once resident memory passed
/// about 180 MB the kernel squeezed the cache and sled read its files again
/// (tens of thousands of refaults a round, none before); its dirty pages
/// stayed near zero, so watching the cgroup's charge instead of resident
/// memory would not have changed when it sheds. Shedding from 90% the
/// kernel still killed the daemon in two runs of four; from 80%, in none of
/// four (nor at 192 MiB), its resident memory peaking at 238 MB.
pub const SHED_PERCENT: u8 = 80;
/// Floors, below which the bounds stop doing their job.
const SLED_CACHE_FLOOR: u64 = 4 << 20;
const RECORDS_FLOOR: u64 = 1 << 20;

/// Defaults of the memory bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryDefaults {
    pub sled_cache_bytes: u64,
    pub idempotency_memory_bytes: usize,
}

/// The bounds' defaults under `limit` (none: the host defaults).
pub fn defaults_under(limit: Option<u64>, host: MemoryDefaults) -> MemoryDefaults {
    let Some(limit) = limit else {
        return host;
    };
    let share = |of: u64, floor: u64, most: u64| (limit / of).max(floor).min(most);
    let records_most = u64::try_from(host.idempotency_memory_bytes).unwrap_or(u64::MAX);
    MemoryDefaults {
        sled_cache_bytes: share(SLED_CACHE_SHARE, SLED_CACHE_FLOOR, host.sled_cache_bytes),
        idempotency_memory_bytes: usize::try_from(share(
            RECORDS_SHARE,
            RECORDS_FLOOR,
            records_most,
        ))
        .unwrap_or(host.idempotency_memory_bytes),
    }
}

/// This process's memory limit; `None` when it has none, or it cannot be
/// read (no cgroups: the host defaults then apply).
pub fn detect() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    limit_of(&cgroup, &mountinfo, |path| {
        std::fs::read_to_string(path).ok()
    })
}

/// The tightest limit on the cgroups named in `cgroup` (the text of
/// `/proc/self/cgroup`), through the mounts in `mountinfo`, reading the
/// limit files with `read`.
pub fn limit_of(
    cgroup: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<u64> {
    let mut tightest: Option<u64> = None;
    for (version, path) in memory_cgroups(cgroup) {
        let Some(mount) = mounts(mountinfo).find(|m| m.version == version) else {
            continue;
        };
        let file = match version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        for dir in mount.dirs_up_from(path) {
            let Some(text) = read(&dir.join(file)) else {
                continue;
            };
            if let Some(limit) = parse_limit(version, text.trim()) {
                tightest = Some(tightest.map_or(limit, |t| t.min(limit)));
            }
        }
    }
    tightest
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The memory controller's cgroups of the process: v1's, v2's, or both
/// (a hybrid host mounts both; the controller is on one of them).
fn memory_cgroups(cgroup: &str) -> impl Iterator<Item = (Version, &str)> {
    cgroup.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if id == "0" && controllers.is_empty() {
            Some((Version::V2, path))
        } else if controllers.split(',').any(|c| c == "memory") {
            Some((Version::V1, path))
        } else {
            None
        }
    })
}

/// A cgroup hierarchy's mount: which cgroup (`root`) it shows at `point`.
#[derive(Debug)]
struct Mount<'a> {
    version: Version,
    root: &'a str,
    point: &'a str,
}

impl Mount<'_> {
    /// The directories of `cgroup` and its ancestors that the mount shows,
    /// the deepest first. A container's mount shows its own cgroup as the
    /// root while `/proc/self/cgroup` may name it by its host path: then
    /// only the root is known to be this process's, or an ancestor of it.
    fn dirs_up_from(&self, cgroup: &str) -> Vec<PathBuf> {
        let relative = if self.root == "/" {
            Some(cgroup)
        } else {
            cgroup
                .strip_prefix(self.root)
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        let mut dirs = vec![PathBuf::from(self.point)];
        if let Some(relative) = relative {
            let mut dir = PathBuf::from(self.point);
            for part in relative.split('/').filter(|p| !p.is_empty() && *p != "..") {
                dir.push(part);
                dirs.push(dir.clone());
            }
        }
        dirs.reverse();
        dirs
    }
}

/// The cgroup mounts in `mountinfo` (see proc(5)): `ID PARENT MAJ:MIN ROOT
/// POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = before.split(' ');
        let root = fields.nth(3)?;
        let point = fields.next()?;
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let options = after.nth(1).unwrap_or("");
        let version = match fstype {
            "cgroup2" => Version::V2,
            "cgroup" if options.split(',').any(|o| o == "memory") => Version::V1,
            _ => return None,
        };
        Some(Mount {
            version,
            root,
            point,
        })
    })
}

fn parse_limit(version: Version, text: &str) -> Option<u64> {
    match (version, text) {
        (Version::V2, "max") => None,
        (Version::V1, _) => text.parse().ok().filter(|l| *l < V1_UNLIMITED),
        (Version::V2, _) => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn host() -> MemoryDefaults {
        MemoryDefaults {
            sled_cache_bytes: 256 * MIB,
            idempotency_memory_bytes: 64 << 20,
        }
    }

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = entries
            .iter()
            .map(|(p, v)| (PathBuf::from(p), format!("{v}\n")))
            .collect();
        move |path| map.get(path).cloned()
    }

    const V2_MOUNT: &str =
        "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw";

    #[test]
    fn a_container_on_cgroup_v2_sees_its_limit_at_the_mount_root() {
        // With a cgroup namespace the process's cgroup is "/" to itself.
        let read = files(&[("/sys/fs/cgroup/memory.max", "268435456")]);
        assert_eq!(limit_of("0::/\n", V2_MOUNT, read), Some(256 * MIB));
    }

    #[test]
    fn a_service_on_cgroup_v2_takes_the_tightest_limit_on_its_way_up() {
        let read = files(&[
            (
                "/sys/fs/cgroup/system.slice/troupe.service/memory.max",
                "max",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "1073741824"),
            ("/sys/fs/cgroup/memory.max", "536870912"),
        ]);
        let cgroup = "0::/system.slice/troupe.service\n";
        assert_eq!(limit_of(cgroup, V2_MOUNT, read), Some(512 * MIB));
        let unlimited = files(&[(
            "/sys/fs/cgroup/system.slice/troupe.service/memory.max",
            "max",
        )]);
        assert_eq!(limit_of(cgroup, V2_MOUNT, unlimited), None);
    }

    #[test]
    fn a_hybrid_host_reads_the_v1_memory_controller() {
        // The layout of this project's CI machine.
        let cgroup = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n";
        let mountinfo = "\
            40 31 0:35 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
            41 31 0:36 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
            42 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
                "9223372036854771712",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
                "134217728",
            ),
        ]);
        assert_eq!(limit_of(cgroup, mountinfo, read), Some(128 * MIB));
        let unlimited = files(&[(
            "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
            "9223372036854771712",
        )]);
        assert_eq!(limit_of(cgroup, mountinfo, unlimited), None);
    }

    #[test]
    fn a_v1_container_named_by_its_host_path_reads_its_mount_root() {
        // No cgroup namespace: /proc/self/cgroup has the host's path, the
        // mount shows the container's own cgroup as its root.
        let cgroup = "4:memory:/kubepods/pod1/c1\n";
        let mountinfo =
            "50 40 0:35 /kubepods/pod1/c1 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let read = files(&[("/sys/fs/cgroup/memory/memory.limit_in_bytes", "67108864")]);
        assert_eq!(limit_of(cgroup, mountinfo, read), Some(64 * MIB));
        // A mount of another subtree than the process's: only its root.
        let elsewhere = "50 40 0:35 /other /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let read = files(&[("/sys/fs/cgroup/memory/memory.limit_in_bytes", "67108864")]);
        assert_eq!(limit_of(cgroup, elsewhere, read), Some(64 * MIB));
    }

    #[test]
    fn without_cgroups_there_is_no_limit() {
        assert_eq!(limit_of("", "", |_| None), None);
        assert_eq!(limit_of("0::/\n", V2_MOUNT, |_| None), None);
        assert_eq!(
            limit_of(
                "0::/\n",
                V2_MOUNT,
                files(&[("/sys/fs/cgroup/memory.max", "junk")])
            ),
            None
        );
    }

    #[test]
    fn the_bounds_take_a_share_of_the_limit_within_floor_and_host_default() {
        assert_eq!(defaults_under(None, host()), host());
        assert_eq!(
            defaults_under(Some(512 * MIB), host()),
            MemoryDefaults {
                sled_cache_bytes: 64 * MIB,
                idempotency_memory_bytes: 64 << 20,
            }
        );
        assert_eq!(
            defaults_under(Some(128 * MIB), host()),
            MemoryDefaults {
                sled_cache_bytes: 16 * MIB,
                idempotency_memory_bytes: 16 << 20,
            }
        );
        assert_eq!(
            defaults_under(Some(4 * MIB), host()),
            MemoryDefaults {
                sled_cache_bytes: 4 * MIB,
                idempotency_memory_bytes: 1 << 20,
            }
        );
        assert_eq!(defaults_under(Some(64 << 30), host()), host());
    }
}
