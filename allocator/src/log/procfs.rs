//! What the log records about the process: `/proc/self/status` memory, the
//! executable, the command line, and the module map with GNU build ids.
//!
//! These run on the writer thread or when the log starts, never in the
//! allocator's hot path; only the periodic [`status`] sample avoids
//! allocating. The parsing itself is heaptag-format's (`procfs`), shared with
//! `heaptag run` / `heaptag watch`.

use std::ffi::CStr;
use std::io::Read;

use heaptag_format::Module;

/// Memory figures from `/proc/self/status`, in bytes (heaptag-format's parser).
pub(crate) use heaptag_format::procfs::ProcStatus as Status;

/// Reads `/proc/self/status`; `None` if it cannot be read (not Linux).
///
/// Reads through a stack buffer, a piece of whole lines at a time, so a
/// sample allocates nothing on the writer thread.
pub(crate) fn status() -> Option<Status> {
    let f = std::fs::File::open("/proc/self/status").ok()?;
    read_status(f, &mut [0u8; 2048])
}

/// Parses a status file from `f` through `buf`, whole lines at a time.
fn read_status(mut f: impl Read, buf: &mut [u8]) -> Option<Status> {
    let mut s = Status::default();
    // Bytes of an unfinished line at the start of `buf`.
    let mut kept = 0;
    // A line longer than the buffer (a long `Groups:`) is being skipped.
    let mut skipping = false;
    loop {
        let n = match f.read(&mut buf[kept..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        let filled = kept + n;
        let Some(last_nl) = buf[..filled].iter().rposition(|&b| b == b'\n') else {
            // No line end in a full buffer: drop the line's start.
            skipping |= filled == buf.len();
            kept = if skipping { 0 } else { filled };
            continue;
        };
        let mut lines = &buf[..last_nl];
        if std::mem::take(&mut skipping) {
            // The rest of a skipped line runs up to the first line end.
            let first_nl = lines.iter().position(|&b| b == b'\n').unwrap_or(lines.len());
            lines = &lines[first_nl.min(lines.len())..];
        }
        s.update(lines);
        buf.copy_within(last_nl + 1..filled, 0);
        kept = filled - last_nl - 1;
    }
    if !skipping {
        s.update(&buf[..kept]);
    }
    Some(s)
}

/// The executable's path.
pub(crate) fn exe() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The command line.
pub(crate) fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| heaptag_format::procfs::parse_cmdline(&b))
        .unwrap_or_default()
}

/// Executable mappings with their build ids: what an offline symbolizer
/// needs to turn an address into (object, offset) and find the debug info.
pub(crate) fn modules() -> Vec<Module> {
    let ids = build_ids();
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(offset)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(2).unwrap_or("");
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(file_offset)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        out.push(Module {
            start,
            end,
            file_offset,
            path: path.to_owned(),
            build_id: ids
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, id)| id.clone())
                .unwrap_or_default(),
        });
    }
    out
}

/// GNU build ids of the loaded objects, by path.
fn build_ids() -> Vec<(String, Vec<u8>)> {
    let mut ids: Vec<(String, Vec<u8>)> = Vec::new();
    let exe = exe();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` for the duration
        // of the callback, and `data` is the `&mut (..)` passed below.
        let (info, (ids, exe)) = unsafe { (&*info, &mut *(data as *mut (&mut Vec<(String, Vec<u8>)>, &str))) };
        let name = if info.dlpi_name.is_null() {
            ""
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_str().unwrap_or("")
        };
        let name = if name.is_empty() { *exe } else { name };
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_NOTE {
                continue;
            }
            let start = (info.dlpi_addr + ph.p_vaddr) as *const u8;
            // SAFETY: a PT_NOTE segment of a loaded object is mapped readable
            // for `p_memsz` bytes at load address + `p_vaddr`.
            let notes = unsafe { std::slice::from_raw_parts(start, ph.p_memsz as usize) };
            if let Some(id) = gnu_build_id(notes) {
                ids.push((name.to_owned(), id.to_vec()));
            }
        }
        0
    }
    let mut data: (&mut Vec<(String, Vec<u8>)>, &str) = (&mut ids, &exe);
    // SAFETY: `each` matches the callback type and only uses `data` as the
    // pair passed here, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            (&mut data as *mut (&mut Vec<(String, Vec<u8>)>, &str)).cast(),
        )
    };
    ids
}

/// Finds the NT_GNU_BUILD_ID note in an ELF note segment.
fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let word = |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().expect("4 bytes")) as usize;
        let (namesz, descsz, ty) = (word(0), word(4), word(8));
        let name_end = 12 + align4(namesz);
        let desc_end = name_end.checked_add(align4(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if ty == 3 && namesz == 4 && &notes[12..16] == b"GNU\0" {
            return Some(&notes[name_end..name_end + descsz]);
        }
        notes = &notes[desc_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_read_in_pieces_through_a_small_buffer() {
        let text = format!(
            "Name:\tx\nGroups:\t{}\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\nRssFile:\t 256 kB",
            "1234 ".repeat(40)
        );
        let want = Status::parse(text.as_bytes());
        assert_eq!((want.vm_rss, want.rss_file), (1 << 20, 256 << 10));
        for size in [18, 24, 31, 64, 4096] {
            let got = read_status(text.as_bytes(), &mut vec![0u8; size]);
            assert_eq!(got, Some(want), "buffer of {size}");
        }
    }

    #[test]
    fn this_process_has_an_executable_mapping() {
        let m = modules();
        assert!(m.iter().any(|m| m.path == exe()), "{m:?}");
        assert!(status().unwrap().vm_rss > 0);
    }
}
