//! Offline symbolization: names for the frames of a log that has no Symbol
//! records (the process was killed before `finish()`), from the module map in
//! its header and the binaries' debug info on this machine.
//!
//! A runtime address `a` in a mapping `[start, end)` of file offset `o` is at
//! file offset `a - start + o`; the ELF segment holding that offset gives the
//! address the debug info uses. A binary whose GNU build id differs from the
//! one the log recorded is skipped: its symbols would be wrong.

use std::collections::BTreeMap;

use object::{Object, ObjectSegment};

use crate::model::{Model, Sym};
use crate::text::printable;

/// Largest object file read for symbols (debug builds of big programs reach
/// a few GiB; anything larger is not a binary worth reading whole).
pub const MAX_OBJECT_BYTES: u64 = 4 << 30;

/// Reads the object file at `path` for symbols: only a regular file (opened
/// without blocking, so a FIFO named in a hostile module map cannot hang
/// the analyzer, and checked with `fstat`, so `/dev/zero` is not read
/// forever), of at most [`MAX_OBJECT_BYTES`].
pub fn read_object(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| "not readable here".to_string())?;
    let meta = f.metadata().map_err(|_| "not readable here".to_string())?;
    if !meta.file_type().is_file() {
        return Err("not a regular file: not read".into());
    }
    if meta.len() > MAX_OBJECT_BYTES {
        return Err(format!("larger than {} GiB: not read", MAX_OBJECT_BYTES >> 30));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    // Never more than the cap, even if the file grows while read.
    f.by_ref()
        .take(MAX_OBJECT_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|_| "not readable here".to_string())?;
    if data.len() as u64 > MAX_OBJECT_BYTES {
        return Err(format!("larger than {} GiB: not read", MAX_OBJECT_BYTES >> 30));
    }
    Ok(data)
}

/// The symbolization step, after loading: a log cut short has no Symbol
/// records, so its frames are named from the binaries here (the modules that
/// cannot be read are noted in [`Model::symbol_notes`]). A log with symbols
/// is left as it is, and nothing is read.
pub fn symbolize(m: &mut Model) {
    if m.symbols.is_empty() && !m.stacks.is_empty() {
        let (_, skipped) = fill_missing(m);
        m.symbol_notes = skipped;
    }
}

/// Resolves every stack frame of `m` that has no symbol yet. Returns the
/// number resolved and the modules skipped (missing, unreadable, rebuilt).
pub fn fill_missing(m: &mut Model) -> (usize, Vec<String>) {
    let mut by_module: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    // A binary search per frame (not frames x modules).
    let index = crate::model::ModuleIndex::new(&m.header.modules);
    for frames in m.stacks.values() {
        for &a in frames {
            if m.symbols.contains_key(&a) {
                continue;
            }
            if let Some(idx) = index.find(a) {
                by_module.entry(idx).or_default().push(a);
            }
        }
    }
    let mut resolved = 0;
    let mut skipped = Vec::new();
    for (i, mut addrs) in by_module {
        addrs.sort_unstable();
        addrs.dedup();
        let md = m.header.modules[i].clone();
        let data = match read_object(&md.path) {
            Ok(data) => data,
            Err(why) => {
                skipped.push(format!("{}: {why}", md.path));
                continue;
            }
        };
        let Ok(obj) = object::File::parse(&*data) else {
            skipped.push(format!("{}: not an object file", md.path));
            continue;
        };
        if !md.build_id.is_empty()
            && obj
                .build_id()
                .ok()
                .flatten()
                .is_some_and(|id| id != md.build_id.as_slice())
        {
            skipped.push(format!("{}: rebuilt since the run (build id differs)", md.path));
            continue;
        }
        // The loader opens the path again: only if it is still the regular
        // file just checked (it could have been swapped for a FIFO).
        if !std::fs::metadata(&md.path).is_ok_and(|f| f.is_file()) {
            skipped.push(format!("{}: changed while being read", md.path));
            continue;
        }
        let Ok(loader) = addr2line::Loader::new(&md.path) else {
            skipped.push(format!("{}: no debug info", md.path));
            continue;
        };
        let segments: Vec<(u64, u64, u64)> = obj
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        for a in addrs {
            // A return address: look up the call instruction before it.
            let offset = a.saturating_sub(1) - md.start + md.file_offset;
            let Some(&(seg_off, _, vaddr)) = segments.iter().find(|(o, sz, _)| *o <= offset && offset < o + sz) else {
                continue;
            };
            let probe = offset - seg_off + vaddr;
            // Every frame inlined at the address, innermost first.
            let mut chain: Vec<Sym> = Vec::new();
            if let Ok(mut frames) = loader.find_frames(probe) {
                while let Ok(Some(f)) = frames.next() {
                    if chain.len() >= crate::sites::MAX_INLINED {
                        break;
                    }
                    let mut sym = Sym::default();
                    if let Some(func) = f.function.as_ref().and_then(|n| n.raw_name().ok()) {
                        sym.function = format!("{:#}", rustc_demangle::demangle(&func));
                    }
                    if let Some(loc) = f.location {
                        sym.file = loc.file.unwrap_or_default().to_string();
                        sym.line = loc.line.unwrap_or(0);
                    }
                    chain.push(sym);
                }
            }
            // The outermost frame is the function the code is in: the symbol
            // table names it when the debug info does not.
            if let Some(name) = loader.find_symbol(probe) {
                match chain.last_mut() {
                    Some(last) if last.function.is_empty() => {
                        last.function = format!("{:#}", rustc_demangle::demangle(name));
                    }
                    None => chain.push(Sym {
                        function: format!("{:#}", rustc_demangle::demangle(name)),
                        ..Sym::default()
                    }),
                    Some(_) => {}
                }
            }
            chain.retain(|s| !s.function.is_empty() || !s.file.is_empty());
            let mut chain = chain.into_iter().map(|mut s| {
                s.function = printable(s.function);
                s.file = printable(s.file);
                s
            });
            if let Some(first) = chain.next() {
                m.symbols.insert(a, first);
                for s in chain {
                    crate::sites::add_inlined(&mut m.inlined, a, s);
                }
                resolved += 1;
            }
        }
    }
    (resolved, skipped)
}
