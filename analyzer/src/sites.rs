//! Call sites: the first frame of a stack that is the program's own code.

use crate::model::Model;

/// Frames of heaptag, the allocator API and the standard containers, which
/// every stack starts with and which name no call site.
fn internal(function: &str) -> bool {
    const CONTAINS: [&str; 4] = ["heaptag_alloc::", "__rust_", "__rg_", "__rdl_"];
    const PREFIX: [&str; 12] = [
        "backtrace::",
        "<backtrace::",
        "alloc::",
        "<alloc::",
        "core::",
        "<core::",
        "<T as alloc::",
        "<T as core::",
        "std::alloc",
        "<std::alloc",
        "hashbrown::",
        "<hashbrown::",
    ];
    CONTAINS.iter().any(|c| function.contains(c)) || PREFIX.iter().any(|p| function.starts_with(p))
}

/// A readable name for the call site of `stack`: `function (file:line)` of
/// its first frame outside heaptag and the allocator machinery; the module
/// and offset when the log has no symbols (it was not finished).
pub fn site_name(m: &Model, stack: u32) -> String {
    let Some(frames) = m.stacks.get(&stack) else {
        return "(no stack)".into();
    };
    for &f in frames {
        if let Some(sym) = m.symbols.get(&f) {
            if sym.function.is_empty() || internal(&sym.function) {
                continue;
            }
            return if sym.file.is_empty() {
                sym.function.clone()
            } else {
                let file = sym.file.rsplit('/').next().unwrap_or(&sym.file);
                format!("{} ({file}:{})", sym.function, sym.line)
            };
        }
    }
    // No symbols: the first frame of the program's own executable that is
    // not one of the first three (heaptag's record/capture/alloc frames).
    let exe = &m.header.exe;
    for &f in frames.iter().skip(3) {
        if let Some(module) = m.header.modules.iter().find(|md| md.start <= f && f < md.end) {
            if &module.path == exe {
                let name = module.path.rsplit('/').next().unwrap_or(&module.path);
                let name = crate::text::printable(name.to_owned());
                return format!("{name}+{:#x}", f - module.start + module.file_offset);
            }
        }
    }
    frames
        .first()
        .map_or_else(|| "(no stack)".into(), |f| format!("{f:#x}"))
}

#[cfg(test)]
mod tests {
    use super::internal;

    #[test]
    fn allocator_frames_are_internal_program_frames_are_not() {
        for f in [
            "backtrace::backtrace::libunwind::trace",
            "heaptag_alloc::global::record",
            "<heaptag_alloc::global::Alloc<A> as core::alloc::global::GlobalAlloc>::alloc",
            "__rust_alloc",
            "alloc::raw_vec::RawVec<T,A>::grow_one",
            "<T as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
        ] {
            assert!(internal(f), "{f}");
        }
        for f in [
            "pce_pipeline::build_pce",
            "<prover::Pce as core::clone::Clone>::clone",
            "rayon_core::scope::scope",
        ] {
            assert!(!internal(f), "{f}");
        }
    }
}
