//! What the log records about the process: `/proc/self/status` memory, the
//! executable, the command line, and the module map with GNU build ids.
//!
//! These run on the writer thread or when the log starts, never in the
//! allocator's hot path, so they may allocate.

use std::ffi::CStr;

use heaptag_format::Module;

/// Memory figures from `/proc/self/status`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) vm_rss: u64,
    pub(crate) vm_hwm: u64,
    pub(crate) rss_anon: u64,
    pub(crate) rss_file: u64,
}

/// Reads `/proc/self/status`; `None` if it cannot be read (not Linux).
pub(crate) fn status() -> Option<Status> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    Some(parse_status(&text))
}

fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kib = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let bytes = kib * 1024;
        match key {
            "VmRSS" => s.vm_rss = bytes,
            "VmHWM" => s.vm_hwm = bytes,
            "RssAnon" => s.rss_anon = bytes,
            "RssFile" => s.rss_file = bytes,
            _ => {}
        }
    }
    s
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
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
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
    fn status_lines_parse_to_bytes() {
        let s = parse_status("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\nRssFile:\t 256 kB\n");
        assert_eq!(
            s,
            Status {
                vm_rss: 1 << 20,
                vm_hwm: 2 << 20,
                rss_anon: 512 << 10,
                rss_file: 256 << 10
            }
        );
    }

    #[test]
    fn this_process_has_an_executable_mapping() {
        let m = modules();
        assert!(m.iter().any(|m| m.path == exe()), "{m:?}");
        assert!(status().unwrap().vm_rss > 0);
    }
}
