//! `heaptag run` and `heaptag watch`: the memory of any process (and its
//! children) sampled from `/proc` into a heaptag log, for programs that do
//! not link heaptag, or beside the log of one that does.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heaptag_format::procfs::{self, ProcStatus};
use heaptag_format::{FrameEncoder, Header, LogSettings, Record, FRAME_HEADER_LEN};

/// How to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Time between samples.
    pub interval: Duration,
    /// The log to write.
    pub log: PathBuf,
    /// Follow the children of the process (and theirs).
    pub children: bool,
}

/// Why sampling could not start (exit code 2; 127 for a command that cannot
/// start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// No such process.
    #[error("no process {0}")]
    NoProcess(u32),
    /// The process exists but its memory cannot be read (another user's).
    #[error("cannot read the memory of process {0}: {1} (is it another user's? try as that user or root)")]
    CannotRead(u32, #[source] io::Error),
    /// The command could not be started.
    #[error("cannot start `{0}`")]
    CannotStart(String, #[source] io::Error),
    /// The log could not be written.
    #[error("{}: cannot write the log", .0.display())]
    Log(PathBuf, #[source] io::Error),
}

/// A log of process samples.
struct ProcLog {
    file: File,
    path: PathBuf,
    enc: FrameEncoder<Vec<u8>>,
    start: Instant,
}

impl ProcLog {
    fn create(
        path: &Path,
        pid: u32,
        exe: String,
        cmdline: Vec<String>,
        interval: Duration,
    ) -> Result<ProcLog, WatchError> {
        let err = |e| WatchError::Log(path.to_path_buf(), e);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(err)?;
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut head = Vec::new();
        Header {
            version: heaptag_format::VERSION,
            pid,
            start_wall_ns: wall,
            start_mono_ns: 0,
            exe,
            cmdline,
            heaptag_version: format!("{} (heaptag run/watch)", env!("CARGO_PKG_VERSION")),
            settings: LogSettings {
                interval_ns: interval.as_nanos() as u64,
                ..LogSettings::default()
            },
            modules: Vec::new(),
        }
        .encode(&mut head);
        file.write_all(&head).map_err(err)?;
        Ok(ProcLog {
            file,
            path: path.to_path_buf(),
            enc: FrameEncoder::new(Vec::new(), 1),
            start: Instant::now(),
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn put(&mut self, r: Record) {
        self.enc.push(r.borrowed());
    }

    /// Writes what was put since the last flush as one frame.
    fn flush(&mut self) -> Result<(), WatchError> {
        if self.enc.is_empty() {
            return Ok(());
        }
        let mut frame = Vec::with_capacity(self.enc.len() + FRAME_HEADER_LEN);
        self.enc.finish(&mut frame);
        self.file
            .write_all(&frame)
            .map_err(|e| WatchError::Log(self.path.clone(), e))
    }
}

/// One sample of a process: its status figures and, when readable, its Pss.
fn sample(pid: u32) -> io::Result<(ProcStatus, u64)> {
    let status = ProcStatus::parse(&std::fs::read(format!("/proc/{pid}/status"))?);
    let pss = std::fs::read(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| procfs::parse_kib(&t, "Pss"))
        .unwrap_or(0);
    Ok((status, pss))
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| procfs::parse_cmdline(&b).join(" "))
        .unwrap_or_default()
}

fn stat(pid: u32) -> Option<procfs::ProcStat> {
    procfs::parse_stat(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

fn ppid(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.ppid)
}

/// `root` and, with `children`, every descendant, at this moment.
fn family(root: u32, children: bool) -> Vec<u32> {
    let mut out = vec![root];
    if !children {
        return out;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| Some((p, ppid(p)?)))
        .collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out
}

/// Samples the family of `root` until `done()` says to stop; `exit_code`
/// gives the root's code once it has ended.
fn sample_loop(
    log: &mut ProcLog,
    root: u32,
    cfg: &WatchConfig,
    mut ended: impl FnMut() -> Option<i32>,
) -> Result<i32, WatchError> {
    let mut known: Vec<u32> = Vec::new();
    loop {
        let t = log.now();
        let now: Vec<u32> = family(root, cfg.children);
        for &pid in &now {
            if !known.contains(&pid) {
                known.push(pid);
                log.put(Record::ProcStart {
                    time_ns: t,
                    pid,
                    ppid: ppid(pid).unwrap_or(0),
                    cmdline: cmdline(pid),
                });
            }
            if let Ok((m, pss)) = sample(pid) {
                log.put(Record::ProcRss {
                    time_ns: t,
                    pid,
                    vm_rss: m.vm_rss,
                    vm_hwm: m.vm_hwm,
                    rss_anon: m.rss_anon,
                    rss_file: m.rss_file,
                    rss_shmem: m.rss_shmem,
                    pss,
                });
            }
        }
        known.retain(|pid| {
            let alive = now.contains(pid) || *pid == root;
            if !alive {
                log.put(Record::ProcExit {
                    time_ns: t,
                    pid: *pid,
                    code: -1,
                });
            }
            alive
        });
        if let Some(code) = ended() {
            log.put(Record::ProcExit {
                time_ns: log.now(),
                pid: root,
                code,
            });
            let t = log.now();
            log.put(Record::End { time_ns: t, dropped: 0 });
            log.flush()?;
            return Ok(code);
        }
        log.flush()?;
        std::thread::sleep(cfg.interval);
    }
}

static CHILD: AtomicI32 = AtomicI32::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our child's.
        unsafe { libc::kill(pid, sig) };
    }
}

extern "C" fn stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn on_signals(handler: extern "C" fn(libc::c_int)) {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only does async-signal-safe work (an atomic and kill).
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

/// `heaptag run`: starts `cmd`, samples it (and its children) into
/// `cfg.log` until it exits, forwarding SIGINT and SIGTERM to it; returns its
/// exit code (128 + signal when killed). The command gets `HEAPTAG_LOG`
/// (beside `cfg.log`) unless already set, so a program linking heaptag writes
/// its own log too.
pub fn run_command(cfg: &WatchConfig, cmd: &[OsString]) -> Result<i32, WatchError> {
    let (prog, args) = cmd.split_first().ok_or_else(|| {
        WatchError::CannotStart(
            String::new(),
            io::Error::new(io::ErrorKind::InvalidInput, "no command given"),
        )
    })?;
    let shown = cmd.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    let mut c = Command::new(prog);
    c.args(args);
    if std::env::var_os("HEAPTAG_LOG").is_none() {
        let stem = cfg
            .log
            .file_stem()
            .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
        c.env("HEAPTAG_LOG", cfg.log.with_file_name(format!("{stem}.app-%p.htlog")));
    }
    let mut child = c.spawn().map_err(|e| WatchError::CannotStart(shown.clone(), e))?;
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::Relaxed);
    on_signals(forward);
    let mut log = match ProcLog::create(
        &cfg.log,
        pid,
        prog.to_string_lossy().into_owned(),
        cmd_strings(cmd),
        cfg.interval,
    ) {
        Ok(l) => l,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    sample_loop(&mut log, pid, cfg, || {
        child
            .try_wait()
            .ok()
            .flatten()
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
    })
}

fn cmd_strings(cmd: &[OsString]) -> Vec<String> {
    cmd.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// `heaptag watch`: samples a running process (and its children) until it
/// exits or SIGINT/SIGTERM; returns 0.
pub fn watch_pid(cfg: &WatchConfig, pid: u32) -> Result<i32, WatchError> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(WatchError::NoProcess(pid));
    }
    if let Err(e) = sample(pid) {
        return Err(if e.kind() == io::ErrorKind::NotFound {
            WatchError::NoProcess(pid)
        } else {
            WatchError::CannotRead(pid, e)
        });
    }
    STOP.store(false, Ordering::Relaxed);
    on_signals(stop);
    let cmd = cmdline(pid);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_or_else(|_| cmd.clone(), |p| p.display().to_string());
    let mut log = ProcLog::create(
        &cfg.log,
        pid,
        exe,
        cmd.split(' ').map(String::from).collect(),
        cfg.interval,
    )?;
    sample_loop(&mut log, pid, cfg, || {
        let gone = !Path::new(&format!("/proc/{pid}/status")).exists() || is_zombie(pid);
        (gone || STOP.load(Ordering::Relaxed)).then_some(0)
    })
}

fn is_zombie(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state == b'Z')
}
