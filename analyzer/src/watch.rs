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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

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
    /// Ctrl-C / SIGTERM handling could not be installed.
    #[error("cannot install handlers for SIGINT and SIGTERM")]
    Signals(#[source] io::Error),
}

/// A log of process samples.
struct ProcLog {
    file: File,
    path: PathBuf,
    enc: FrameEncoder<Vec<u8>>,
    start: Instant,
}

/// The log file, created (0600, never through a symlink, never over an
/// existing file) before anything is started, so a log that cannot be
/// written stops `heaptag run` before the command has done anything.
struct NewLog {
    file: File,
    path: PathBuf,
}

impl NewLog {
    fn create(path: &Path) -> Result<NewLog, WatchError> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| WatchError::Log(path.to_path_buf(), e))?;
        Ok(NewLog {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Writes the header of the log of process `pid`.
    fn start(self, pid: u32, exe: String, cmdline: Vec<String>, interval: Duration) -> Result<ProcLog, WatchError> {
        let NewLog { mut file, path } = self;
        let err = |e| WatchError::Log(path.clone(), e);
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
            path,
            enc: FrameEncoder::new(Vec::new(), 1),
            start: Instant::now(),
        })
    }
}

impl ProcLog {
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

/// How sampling of the root process ended.
enum Ended {
    /// The root process exited with this code (-1: unknown, as when
    /// `watch` sees a process that is not its child go away).
    Exited(i32),
    /// Sampling was stopped (Ctrl-C, SIGTERM) while the root still ran: no
    /// exit is recorded for it.
    Stopped,
}

/// Samples the family of `root` until `ended()` says how it ended; returns
/// the root's exit code (0 when stopped).
fn sample_loop(
    log: &mut ProcLog,
    root: u32,
    cfg: &WatchConfig,
    mut ended: impl FnMut() -> Option<Ended>,
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
        if let Some(how) = ended() {
            let code = match how {
                Ended::Exited(code) => {
                    log.put(Record::ProcExit {
                        time_ns: log.now(),
                        pid: root,
                        code,
                    });
                    code
                }
                Ended::Stopped => 0,
            };
            let t = log.now();
            log.put(Record::End { time_ns: t, dropped: 0 });
            log.flush()?;
            return Ok(code);
        }
        log.flush()?;
        std::thread::sleep(cfg.interval);
    }
}

/// `heaptag run`: starts `cmd`, samples it (and its children) into
/// `cfg.log` until it exits, forwarding SIGINT and SIGTERM to it; returns its
/// exit code (128 + signal when killed). The command gets `HEAPTAG_LOG`
/// (beside `cfg.log`, with `%p`) unless already set, so a program linking
/// heaptag writes its own log too, and `HEAPTAG_LOG_INHERIT=1`, so the
/// programs it starts (sampled too) keep the variable and each write their
/// own log (a heaptag program otherwise removes it once read).
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
        c.env("HEAPTAG_LOG_INHERIT", "1");
    }
    // The log first: if it cannot be written, the command never starts.
    let new = NewLog::create(&cfg.log)?;
    // Ctrl-C and SIGTERM are caught before the command starts (one that
    // arrives meanwhile waits in `signals`), then forwarded to it.
    let mut signals = Signals::new([SIGINT, SIGTERM]).map_err(WatchError::Signals)?;
    let handle = signals.handle();
    let mut child = match c.spawn() {
        Ok(child) => child,
        Err(e) => {
            drop(new);
            let _ = std::fs::remove_file(&cfg.log);
            return Err(WatchError::CannotStart(shown, e));
        }
    };
    let pid = child.id();
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            // SAFETY: kill(2) with our child's pid and a signal number we
            // received; it cannot affect memory.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    });
    let log = new.start(pid, prog.to_string_lossy().into_owned(), cmd_strings(cmd), cfg.interval);
    let mut log = match log {
        Ok(l) => l,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            handle.close();
            return Err(e);
        }
    };
    let result = sample_loop(&mut log, pid, cfg, || {
        child
            .try_wait()
            .ok()
            .flatten()
            .map(|s| Ended::Exited(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))))
    });
    handle.close();
    let _ = forwarder.join();
    result
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
    let log = NewLog::create(&cfg.log)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(WatchError::Signals)?;
    }
    let cmd = cmdline(pid);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_or_else(|_| cmd.clone(), |p| p.display().to_string());
    let mut log = log.start(pid, exe, cmd.split(' ').map(String::from).collect(), cfg.interval)?;
    sample_loop(&mut log, pid, cfg, || {
        // Not our child: its exit code cannot be known (-1).
        if !Path::new(&format!("/proc/{pid}/status")).exists() || is_zombie(pid) {
            Some(Ended::Exited(-1))
        } else {
            stop.load(Ordering::Relaxed).then_some(Ended::Stopped)
        }
    })
}

fn is_zombie(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state == b'Z')
}
