//! Parsing what Linux's `/proc/PID/*` files say about a process, from bytes
//! already read: the allocator's sampler (its own process) and
//! `heaptag run` / `heaptag watch` (other processes) read the files their own
//! way and share these parsers.
//!
//! [`ProcStatus::update`], [`parse_kib`] and [`parse_stat`] never allocate
//! (the allocator's writer thread parses from a stack buffer);
//! [`parse_cmdline`] returns owned strings.

/// Memory figures of `/proc/PID/status`, in bytes (0 when a line is missing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcStatus {
    /// `VmRSS`: resident set size.
    pub vm_rss: u64,
    /// `VmHWM`: peak resident set size.
    pub vm_hwm: u64,
    /// `RssAnon`: resident anonymous memory.
    pub rss_anon: u64,
    /// `RssFile`: resident file mappings.
    pub rss_file: u64,
    /// `RssShmem`: resident shared memory.
    pub rss_shmem: u64,
}

impl ProcStatus {
    /// Parses the whole text of a status file.
    pub fn parse(text: &[u8]) -> ProcStatus {
        let mut s = ProcStatus::default();
        s.update(text);
        s
    }

    /// Takes the figures of the complete lines in `text` (a reader that
    /// reads the file in pieces calls this once per piece of whole lines).
    pub fn update(&mut self, text: &[u8]) {
        for (key, bytes) in kib_lines(text) {
            match key {
                b"VmRSS" => self.vm_rss = bytes,
                b"VmHWM" => self.vm_hwm = bytes,
                b"RssAnon" => self.rss_anon = bytes,
                b"RssFile" => self.rss_file = bytes,
                b"RssShmem" => self.rss_shmem = bytes,
                _ => {}
            }
        }
    }
}

/// The value of `key` (without its colon: `Pss`) in a `key: N kB` file such
/// as `/proc/PID/smaps_rollup`, in bytes.
pub fn parse_kib(text: &[u8], key: &str) -> Option<u64> {
    kib_lines(text).find(|(k, _)| *k == key.as_bytes()).map(|(_, b)| b)
}

/// `(key, bytes)` of each `key: N kB` line; a line whose value is not a
/// number counts as 0.
fn kib_lines(text: &[u8]) -> impl Iterator<Item = (&[u8], u64)> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let kib = rest
            .split(u8::is_ascii_whitespace)
            .find(|w| !w.is_empty())
            .and_then(|w| std::str::from_utf8(w).ok()?.parse::<u64>().ok())
            .unwrap_or(0);
        Some((key, kib.saturating_mul(1024)))
    })
}

/// The arguments of a `/proc/PID/cmdline` (NUL-separated; empty ones are
/// left out; bytes that are not UTF-8 are replaced).
pub fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&c| c == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// What `/proc/PID/stat` says after the command name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcStat {
    /// The state letter (`R`, `S`, `Z` for a zombie, ...).
    pub state: u8,
    /// The parent's pid.
    pub ppid: u32,
}

/// Parses `pid (comm) state ppid ...`; the command name may hold spaces and
/// parentheses, so the fields start after the last `)`.
pub fn parse_stat(stat: &[u8]) -> Option<ProcStat> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty());
    let state = *fields.next()?.first()?;
    let ppid = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    Some(ProcStat { state, ppid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse_to_bytes() {
        let s = ProcStatus::parse(
            b"Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\nRssFile:\t 256 kB\nRssShmem:\t 4 kB\n",
        );
        assert_eq!(
            s,
            ProcStatus {
                vm_rss: 1 << 20,
                vm_hwm: 2 << 20,
                rss_anon: 512 << 10,
                rss_file: 256 << 10,
                rss_shmem: 4 << 10,
            }
        );
    }

    #[test]
    fn pieces_of_lines_add_up() {
        let mut s = ProcStatus::default();
        s.update(b"VmRSS:\t  1024 kB\n");
        s.update(b"VmHWM:\t  2048 kB\n");
        assert_eq!((s.vm_rss, s.vm_hwm), (1 << 20, 2 << 20));
    }

    #[test]
    fn damaged_status_is_zero_not_a_panic() {
        let s = ProcStatus::parse(b"VmRSS: lots kB\nVmHWM:\nRssAnon: 99999999999999999999 kB\n\xff\xfe");
        assert_eq!(s, ProcStatus::default());
        assert_eq!(parse_kib(b"VmRSS: 18446744073709551615 kB\n", "VmRSS"), Some(u64::MAX));
    }

    #[test]
    fn pss_from_smaps_rollup() {
        let t = b"00400000-7fff rw-p 0 0:0 0 [rollup]\nRss: 100 kB\nPss: 40 kB\nPss_Anon: 30 kB\n";
        assert_eq!(parse_kib(t, "Pss"), Some(40 << 10));
        assert_eq!(parse_kib(t, "Swap"), None);
    }

    #[test]
    fn cmdline_splits_on_nul() {
        assert_eq!(
            parse_cmdline(b"prover\0--partitions\0\x002\0"),
            ["prover", "--partitions", "2"]
        );
        assert!(parse_cmdline(b"").is_empty());
    }

    #[test]
    fn stat_fields_after_the_command_name() {
        let s = parse_stat(b"4242 (a (b) c) Z 17 4242 0").unwrap();
        assert_eq!((s.state, s.ppid), (b'Z', 17));
        assert_eq!(parse_stat(b"4242 (x"), None);
        assert_eq!(parse_stat(b"4242 (x) S notanumber"), None);
    }
}
