//! Log segments for a process that runs for weeks (`HEAPTAG_LOG_MAX`): when
//! the file reaches a size, or has been written for a time, the writer closes
//! it with an end record and goes on in the next one.
//!
//! A size limit counts the bytes a segment holds after its opening (below),
//! so a segment file is the limit plus its opening, plus at most one cycle's
//! frames.
//!
//! Naming: segment 0 is the path given (`HEAPTAG_LOG`, `%p` expanded);
//! segment N >= 1 puts N, at least four digits, before the extension:
//! `prover-4242.htlog`, `prover-4242.0001.htlog`, `prover-4242.0002.htlog`
//! (no extension: `prover.log` -> `prover.0001.log`, `prover` ->
//! `prover.0001`). Readers order segments by their `segment` record (run,
//! index), never by name. heaptag deletes no segment unless told to keep the
//! last N (`HEAPTAG_LOG_KEEP`): then, once a new segment is open, the
//! segment N back is removed if its path still names the file heaptag
//! created (same device and inode; never a file put in its place).
//!
//! Each segment reads alone: the same header (start times, module map) as
//! segment 0, then a `segment` record, the definitions of every tag and stack,
//! and what is alive at that moment: `carried` for each tracked block,
//! `carried_sample` for each sampled small block, `carried_external` for each
//! tag's external bytes. What is alive is the writer's own account of the
//! events it wrote ([`Live`]), so a reader that read the segments before
//! knows exactly the same blocks, whatever the program's threads did
//! meanwhile.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use allocator_api2::vec::Vec as IVec;
use hashbrown::HashMap;

use super::ring::Event;
use crate::internal::{Internal, MixBuild};

/// When a segment is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rotate {
    /// Once it holds this many bytes.
    Bytes(u64),
    /// Once it has been written for this many ns.
    Age(u64),
}

/// Parses `HEAPTAG_LOG_MAX`: a duration with a time unit (`30s`, `15min`,
/// `1h`, also `ms` and `us`), or else a size (`256MiB`, `1G`, a number of
/// bytes; `m` is MiB here, write minutes as `min`). Zero is refused.
pub(crate) fn parse_max(v: &str) -> Option<Rotate> {
    let t = v.trim();
    let unit = t.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
    if matches!(unit, "ms" | "us" | "s" | "min" | "h") {
        let d = heaptag_format::parse_duration(t)?;
        return Some(Rotate::Age(d.as_nanos().min(u128::from(u64::MAX)) as u64));
    }
    heaptag_format::parse_size(t).filter(|&n| n > 0).map(Rotate::Bytes)
}

/// The path of segment `index` of the log whose segment 0 is `base`.
pub(crate) fn segment_path(base: &Path, index: u32) -> PathBuf {
    if index == 0 {
        return base.to_path_buf();
    }
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{index:04}.{ext}"),
        _ => format!("{name}.{index:04}"),
    };
    base.with_file_name(named)
}

/// A block alive in the log as written so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) time_ns: u64,
    pub(crate) thread: u32,
    pub(crate) tag: u32,
    pub(crate) stack: u32,
    pub(crate) size: u64,
    /// Bytes a sampled block stands for; 0 for a tracked block.
    pub(crate) weight: u64,
    pub(crate) tracked: bool,
    /// Allocated by C/C++ through the `native` malloc (a `native` record).
    pub(crate) native: bool,
}

type Map<K, V> = HashMap<K, V, MixBuild, Internal>;

fn map<K, V>() -> Map<K, V> {
    HashMap::with_hasher_in(MixBuild::new(), Internal)
}

/// What is alive according to the events written (replayed as a reader
/// replays them), on heaptag's internal heap: blocks by address, blocks
/// being resized by (thread, old address), external bytes by tag.
pub(crate) struct Live {
    pub(crate) blocks: Map<u64, Block>,
    pub(crate) resizing: Map<(u32, u64), Block>,
    pub(crate) external: Map<u32, i64>,
    /// An insert found no memory: the account is incomplete from here on
    /// (the segments still read alone, with fewer carried blocks).
    pub(crate) incomplete: bool,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            blocks: map(),
            resizing: map(),
            external: map(),
            incomplete: false,
        }
    }
}

impl Live {
    fn insert(&mut self, addr: u64, b: Block) {
        if self.blocks.try_reserve(1).is_err() {
            self.incomplete = true;
            return;
        }
        self.blocks.insert(addr, b);
    }

    /// Applies one event the writer put in the log.
    pub(crate) fn apply(&mut self, ev: &Event) {
        match *ev {
            Event::Alloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
            } => self.insert(
                addr,
                Block {
                    time_ns,
                    thread,
                    tag,
                    stack,
                    size,
                    weight: 0,
                    tracked: true,
                    native: false,
                },
            ),
            Event::SampleAlloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
                weight,
            } => self.insert(
                addr,
                Block {
                    time_ns,
                    thread,
                    tag,
                    stack,
                    size,
                    weight,
                    tracked: false,
                    native: false,
                },
            ),
            Event::Free { addr, .. } | Event::SampleFree { addr, .. } => {
                self.blocks.remove(&addr);
            }
            Event::ReallocBegin { thread, addr, .. } => {
                if let Some(b) = self.blocks.remove(&addr) {
                    if self.resizing.try_reserve(1).is_ok() {
                        self.resizing.insert((thread, addr), b);
                    } else {
                        self.incomplete = true;
                    }
                }
            }
            Event::Realloc {
                thread,
                tag,
                old_addr,
                addr,
                size,
                ..
            } => {
                let old = self
                    .resizing
                    .remove(&(thread, old_addr))
                    .or_else(|| self.blocks.remove(&old_addr));
                if let Some(b) = old {
                    // As the allocator's table keeps it: birth time and
                    // stack carried over, the resizing thread and its tag.
                    self.insert(addr, Block { thread, tag, size, ..b });
                }
            }
            Event::Native { addr } => {
                if let Some(b) = self.blocks.get_mut(&addr) {
                    b.native = true;
                }
            }
            Event::Fingerprint { .. } => {}
        }
    }

    /// An external-memory change the writer put in the log.
    pub(crate) fn external(&mut self, tag: u32, bytes: i64) {
        if self.external.try_reserve(1).is_err() {
            self.incomplete = true;
            return;
        }
        let held = self.external.entry(tag).or_insert(0);
        *held = held.saturating_add(bytes);
        if *held == 0 {
            self.external.remove(&tag);
        }
    }

    /// The blocks, by address (a stable order for the carried records, so
    /// their address deltas stay small).
    pub(crate) fn sorted_blocks(&self) -> IVec<(u64, Block), Internal> {
        let mut v = IVec::new_in(Internal);
        if v.try_reserve(self.blocks.len()).is_ok() {
            v.extend(self.blocks.iter().map(|(&a, &b)| (a, b)));
            v.sort_unstable_by_key(|&(a, _)| a);
        }
        v
    }
}

/// The rotation state of a log written in segments.
pub(crate) struct Segments {
    pub(crate) rotate: Rotate,
    /// Shared by every segment of the run.
    pub(crate) run: u64,
    /// The segment being written.
    pub(crate) index: u32,
    /// When it began, ns since the start.
    pub(crate) began_ns: u64,
    /// Bytes of its header and opening (definitions, carried blocks): not
    /// counted against the size limit, so a live set larger than the limit
    /// cannot make every cycle start a new segment.
    pub(crate) opening_bytes: u64,
    /// Segment 0's path.
    pub(crate) base: PathBuf,
    pub(crate) overwrite: bool,
    /// Keep only this many segments (0: all).
    pub(crate) keep: u32,
    /// The segments still on disk that heaptag may remove, oldest first:
    /// path, device, inode.
    pub(crate) on_disk: VecDeque<(PathBuf, u64, u64)>,
    /// After a failed rotation (the next file could not be created): the
    /// segment's size or age at which to try again.
    pub(crate) retry_at: u64,
    pub(crate) live: Live,
}

impl Segments {
    pub(crate) fn new(rotate: Rotate, run: u64, base: PathBuf, overwrite: bool, now_ns: u64) -> Self {
        Segments {
            rotate,
            run,
            index: 0,
            began_ns: now_ns,
            opening_bytes: 0,
            base,
            overwrite,
            keep: 0,
            on_disk: VecDeque::new(),
            retry_at: 0,
            live: Live::default(),
        }
    }

    /// Whether the segment of `bytes` bytes should be closed at `now_ns`.
    pub(crate) fn due(&self, bytes: u64, now_ns: u64) -> bool {
        match self.rotate {
            Rotate::Bytes(max) => {
                let own = bytes.saturating_sub(self.opening_bytes);
                own >= max && own >= self.retry_at
            }
            Rotate::Age(max) => {
                let age = now_ns.saturating_sub(self.began_ns);
                age >= max && age >= self.retry_at
            }
        }
    }

    /// A segment file was created (open as `fd`); with a keep limit, the
    /// oldest ones beyond it are removed.
    pub(crate) fn created(&mut self, path: PathBuf, fd: libc::c_int) {
        if self.keep == 0 {
            return;
        }
        if let Some((dev, ino)) = file_id_fd(fd) {
            self.on_disk.push_back((path, dev, ino));
        }
        while self.on_disk.len() > self.keep as usize {
            let Some((old, dev, ino)) = self.on_disk.pop_front() else {
                break;
            };
            // Only the file heaptag created, never one put at its path since.
            let same = std::fs::symlink_metadata(&old).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.file_type().is_file() && m.dev() == dev && m.ino() == ino
            });
            if same {
                let _ = std::fs::remove_file(&old);
            }
        }
    }

    /// The next file could not be opened: try again after one more
    /// segment's worth.
    pub(crate) fn failed(&mut self, bytes: u64, now_ns: u64) {
        self.retry_at = match self.rotate {
            Rotate::Bytes(max) => bytes.saturating_sub(self.opening_bytes).saturating_add(max),
            Rotate::Age(max) => now_ns.saturating_sub(self.began_ns).saturating_add(max),
        };
    }
}

/// Device and inode of the open file `fd`.
fn file_id_fd(fd: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: plain data, filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor of the writer; `st` a valid buffer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_put_the_index_before_the_extension() {
        let p = Path::new("/tmp/prover-42.htlog");
        assert_eq!(segment_path(p, 0), PathBuf::from("/tmp/prover-42.htlog"));
        assert_eq!(segment_path(p, 1), PathBuf::from("/tmp/prover-42.0001.htlog"));
        assert_eq!(segment_path(p, 12345), PathBuf::from("/tmp/prover-42.12345.htlog"));
        assert_eq!(segment_path(Path::new("/tmp/log"), 2), PathBuf::from("/tmp/log.0002"));
        assert_eq!(
            segment_path(Path::new("/tmp/.hidden"), 3),
            PathBuf::from("/tmp/.hidden.0003")
        );
        assert_eq!(segment_path(Path::new("a.b.c"), 7), PathBuf::from("a.b.0007.c"));
    }

    #[test]
    fn log_max_is_a_size_or_a_duration() {
        assert_eq!(parse_max("256MiB"), Some(Rotate::Bytes(256 << 20)));
        assert_eq!(parse_max("1m"), Some(Rotate::Bytes(1 << 20)));
        assert_eq!(parse_max("65536"), Some(Rotate::Bytes(65536)));
        assert_eq!(parse_max("1h"), Some(Rotate::Age(3_600_000_000_000)));
        assert_eq!(parse_max(" 15min "), Some(Rotate::Age(900_000_000_000)));
        assert_eq!(parse_max("30s"), Some(Rotate::Age(30_000_000_000)));
        for bad in ["", "0", "0s", "1 day", "-5M", "10MB", "h"] {
            assert_eq!(parse_max(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_segment_is_due_by_its_own_bytes_or_its_age_and_retried_later() {
        let mut s = Segments::new(Rotate::Bytes(1000), 1, PathBuf::from("x.htlog"), false, 0);
        s.opening_bytes = 300;
        assert!(!s.due(1299, 0), "the opening does not count");
        assert!(s.due(1300, 0));
        s.failed(1300, 0);
        assert!(!s.due(1500, 0), "after a failed rotation: one more segment's worth");
        assert!(s.due(2300, 0));
        let mut s = Segments::new(Rotate::Age(50), 1, PathBuf::from("x.htlog"), false, 100);
        assert!(!s.due(1 << 30, 149), "size does not matter by age");
        assert!(s.due(0, 150));
        s.failed(0, 150);
        assert!(!s.due(0, 199));
        assert!(s.due(0, 250));
    }

    #[test]
    fn the_account_follows_frees_and_moves() {
        let mut l = Live::default();
        let alloc = |addr, size| Event::Alloc {
            time_ns: 1,
            thread: 1,
            tag: 3,
            stack: 0,
            addr,
            size,
        };
        l.apply(&alloc(0x1000, 100));
        l.apply(&alloc(0x2000, 200));
        l.apply(&Event::Free {
            time_ns: 2,
            thread: 2,
            addr: 0x1000,
            size: 100,
        });
        l.apply(&Event::ReallocBegin {
            time_ns: 3,
            thread: 1,
            addr: 0x2000,
        });
        // The old address is reused before the Realloc arrives.
        l.apply(&alloc(0x2000, 50));
        l.apply(&Event::Realloc {
            time_ns: 4,
            thread: 1,
            tag: 5,
            old_addr: 0x2000,
            old_size: 200,
            addr: 0x3000,
            size: 300,
        });
        let v = l.sorted_blocks();
        let got: Vec<(u64, u64, u32)> = v.iter().map(|&(a, b)| (a, b.size, b.tag)).collect();
        assert_eq!(got, vec![(0x2000, 50, 3), (0x3000, 300, 5)]);
        assert_eq!(v[1].1.time_ns, 1, "birth time carried over");
        l.external(3, 10);
        l.external(3, -10);
        assert!(l.external.is_empty());
    }
}
