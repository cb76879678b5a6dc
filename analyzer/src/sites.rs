//! Call sites: the first frame of a stack that is the program's own code.
//!
//! A stack's frames are expanded into the functions inlined at each address
//! (innermost first), and the first one the user can act on names the site:
//! not heaptag's, not the unwinder's, not the standard library's, not a
//! dependency's (a crate under Cargo's registry or git checkouts, or one of
//! [`DEFAULT_SKIP`]). A frame's crate is read from its function's path
//! (`rayon::iter::collect::special_extend`, `<prover::Pce as Clone>::clone`)
//! and from its source file (`/rustc/<hash>/library/alloc/...`,
//! `.../registry/src/<index>/rayon-1.10.0/...`), so the short names that
//! `debug = "line-tables-only"` gives inlined frames are placed too. A file
//! of a local crate (a path dependency, such as heaptag's allocator built
//! from a checkout) is placed by the `Cargo.toml` beside its `src` directory
//! when that file is on this machine ([`crate_of_local_file`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use heaptag_format::hash::MixMap;

use crate::model::{Model, Sym};

/// Most inlined frames kept for one address.
pub const MAX_INLINED: usize = 64;

/// Crates whose frames name no call site by default (a name also covers
/// crates named `NAME_*`: `rayon` covers `rayon_core`). Frames of any crate
/// under Cargo's registry or git checkouts are skipped as well.
pub const DEFAULT_SKIP: [&str; 13] = [
    "std",
    "core",
    "alloc",
    "heaptag",
    "backtrace",
    "libunwind",
    "rayon",
    "tokio",
    "crossbeam",
    "hashbrown",
    "allocator_api2",
    "tikv_jemallocator",
    "compiler_builtins",
];

/// Records `sym` as one more frame that `addr`'s code was inlined into.
pub fn add_inlined(map: &mut MixMap<u64, Vec<Sym>>, addr: u64, sym: Sym) {
    let v = map.entry(addr).or_default();
    if v.len() < MAX_INLINED {
        v.push(sym);
    }
}

/// Which frames name a call site: crates to skip besides [`DEFAULT_SKIP`],
/// and crates to keep even though they are skipped by default or live in
/// Cargo's registry (`heaptag sites --skip my_pool --keep rayon`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SitePolicy {
    /// Crates whose frames are skipped too (`-` read as `_`).
    pub skip: Vec<String>,
    /// Crates whose frames are the user's (wins over `skip`).
    pub keep: Vec<String>,
}

impl SitePolicy {
    /// A policy from comma-separated lists of crate names.
    pub fn new(skip: &[String], keep: &[String]) -> Self {
        let list = |v: &[String]| -> Vec<String> {
            v.iter()
                .flat_map(|s| s.split(','))
                .map(|s| s.trim().replace('-', "_"))
                .filter(|s| !s.is_empty())
                .collect()
        };
        SitePolicy {
            skip: list(skip),
            keep: list(keep),
        }
    }

    fn listed(list: &[String], krate: &str) -> bool {
        list.iter()
            .any(|n| krate == n || krate.strip_prefix(n.as_str()).is_some_and(|rest| rest.starts_with('_')))
    }

    /// Whether a frame of `krate` is skipped by its crate.
    fn skips(&self, krate: &str) -> bool {
        !Self::listed(&self.keep, krate)
            && (DEFAULT_SKIP.iter().any(|d| Self::listed(&[(*d).to_string()], krate))
                || Self::listed(&self.skip, krate))
    }

    /// Whether `sym` is the user's own code.
    pub fn is_users(&self, sym: &Sym) -> bool {
        let f = &sym.function;
        // The allocator shims rustc generates in the user's crate (named
        // `__rustc::__rust_alloc` with full debug info, at the
        // `#[global_allocator]` line).
        if ["__rust_", "__rg_", "__rdl_", "__rustc::"]
            .iter()
            .any(|p| f.contains(p))
            || f.starts_with("_Unwind_")
        {
            return false;
        }
        if let Some(k) = crate_of_function(f) {
            if self.skips(k) {
                return false;
            }
        }
        match crate_of_file(&sym.file) {
            Some((k, dependency)) => !(self.skips(&k) || dependency && !Self::listed(&self.keep, &k)),
            None => crate_of_local_file(&sym.file).is_none_or(|k| !self.skips(&k)),
        }
    }
}

/// The crate of a source file outside Cargo's registry and the standard
/// library: the `[package] name` of the `Cargo.toml` beside the nearest
/// `src` directory above it, when that manifest is on this machine (read
/// once per directory). This places the short names that `debug =
/// "line-tables-only"` gives the frames of a path dependency, heaptag's own
/// allocator among them (`record (global.rs:446)` is heaptag's, not the
/// user's), now that logs carry no in-process symbols by default. Files of
/// examples, tests and benches (no `src` above them) are not placed.
pub fn crate_of_local_file(file: &str) -> Option<String> {
    static MANIFESTS: Mutex<Option<HashMap<PathBuf, Option<String>>>> = Mutex::new(None);
    let path = Path::new(file);
    if !path.is_absolute() {
        return None;
    }
    let src = path
        .ancestors()
        .skip(1)
        .find(|a| a.file_name() == Some("src".as_ref()))?;
    let dir = src.parent()?;
    let mut cache = MANIFESTS.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(name) = cache.get(dir) {
        return name.clone();
    }
    let name = std::fs::read_to_string(dir.join("Cargo.toml"))
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| t.get("package")?.get("name")?.as_str().map(|n| n.replace('-', "_")));
    cache.insert(dir.to_path_buf(), name.clone());
    name
}

/// The crate a demangled function path names: the first segment of its
/// path, or of the type of `<Type as Trait>` (the trait's when the type is
/// generic or a primitive, as in `<T as alloc::vec::SpecFromElem>`).
pub fn crate_of_function(f: &str) -> Option<&str> {
    let mut s = f.trim_start();
    while let Some(rest) = s.strip_prefix('<') {
        let rest = rest.trim_start_matches(['&', '*', '[', '(']);
        let rest = rest
            .strip_prefix("mut ")
            .or_else(|| rest.strip_prefix("const "))
            .unwrap_or(rest);
        let rest = rest.strip_prefix("dyn ").unwrap_or(rest);
        // The self type's own path, up to its generics or ` as `.
        let end = rest.find(['<', ' ', '>', ';', ']', ')', ',']).unwrap_or(rest.len());
        if rest[..end].contains("::") {
            s = rest;
            break;
        }
        // A generic or primitive self type: the trait's crate.
        match rest.find(" as ") {
            Some(i) => s = &rest[i + 4..],
            None => return None,
        }
    }
    let end = s.find(['<', ' ', '>', '(', '{']).unwrap_or(s.len());
    let path = &s[..end];
    let (first, _) = path.split_once("::")?;
    (!first.is_empty() && first.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(first)
}

/// The crate a source file belongs to when its path says so, and whether it
/// is a dependency's (Cargo's registry or git checkouts, the standard
/// library's `/rustc/<hash>/library/<crate>/`).
pub fn crate_of_file(file: &str) -> Option<(String, bool)> {
    let file = file.replace('\\', "/");
    if let Some(i) = file.find("/library/") {
        let rest = &file[i + "/library/".len()..];
        let krate = rest.split('/').next().unwrap_or("");
        if file.starts_with("/rustc/")
            || ["std", "core", "alloc", "proc_macro", "panic_unwind", "test"].contains(&krate)
        {
            return Some((krate.replace('-', "_"), true));
        }
    }
    if file.starts_with("/rustc/") {
        return Some(("std".into(), true));
    }
    for marker in ["/registry/src/", "/git/checkouts/", "/vendor/"] {
        if let Some(i) = file.find(marker) {
            let mut parts = file[i + marker.len()..].split('/');
            // registry/src/<index>/<name>-<version>/...; git/checkouts/<name>-<hash>/<rev>/...
            let dir = if marker == "/registry/src/" {
                parts.nth(1)
            } else {
                parts.next()
            };
            let dir = dir.unwrap_or("");
            let name = match dir.rsplit_once('-') {
                Some((n, v))
                    if v.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit() || marker != "/registry/src/") =>
                {
                    n
                }
                _ => dir,
            };
            return Some((name.replace('-', "_"), true));
        }
    }
    None
}

/// One frame of a stack, inlined frames expanded.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Its address.
    pub addr: u64,
    /// Function, file and line, when the log or the binary names it.
    pub sym: Option<Sym>,
    /// Inlined into the next frame (same address).
    pub inlined: bool,
}

impl Frame {
    /// `function (file:line)`, the function alone without a file, or the
    /// address within its module when nothing names it.
    pub fn text(&self, m: &Model) -> String {
        match &self.sym {
            Some(sym) => sym_text(sym),
            None => module_offset(m, self.addr).unwrap_or_else(|| format!("{:#x}", self.addr)),
        }
    }
}

fn sym_text(sym: &Sym) -> String {
    let function = if sym.function.is_empty() { "?" } else { &sym.function };
    if sym.file.is_empty() {
        function.to_string()
    } else {
        let file = sym.file.rsplit('/').next().unwrap_or(&sym.file);
        format!("{function} ({file}:{})", sym.line)
    }
}

fn module_offset(m: &Model, f: u64) -> Option<String> {
    let module = m.header.modules.iter().find(|md| md.start <= f && f < md.end)?;
    let name = module.path.rsplit('/').next().unwrap_or(&module.path);
    let name = crate::text::printable(name.to_owned());
    Some(format!("{name}+{:#x}", f - module.start + module.file_offset))
}

/// The frames of `stack`, innermost first, each address expanded into the
/// functions inlined at it (innermost first).
pub fn frames(m: &Model, stack: u32) -> Vec<Frame> {
    let mut out = Vec::new();
    for &addr in m.stacks.get(&stack).map_or(&[][..], |v| v) {
        let Some(sym) = m.symbols.get(&addr) else {
            out.push(Frame {
                addr,
                sym: None,
                inlined: false,
            });
            continue;
        };
        let callers = m.inlined.get(&addr).map_or(&[][..], |v| v);
        out.push(Frame {
            addr,
            sym: Some(sym.clone()),
            inlined: !callers.is_empty(),
        });
        for (i, s) in callers.iter().enumerate() {
            out.push(Frame {
                addr,
                sym: Some(s.clone()),
                inlined: i + 1 < callers.len(),
            });
        }
    }
    out
}

/// A readable name for the call site of `stack` under the default
/// [`SitePolicy`]: see [`site_name_with`].
pub fn site_name(m: &Model, stack: u32) -> String {
    site_name_with(m, stack, &SitePolicy::default())
}

/// A readable name for the call site of `stack`: `function (file:line)` of
/// its first frame (inlined frames expanded) that `policy` calls the user's;
/// when no frame has symbols (the log was not finished and the binary is not
/// here), the first frame of the program's own executable past heaptag's
/// frames, as module and offset. A stack with no frame of the user's is
/// named by its first frame outside heaptag and the standard library.
pub fn site_name_with(m: &Model, stack: u32, policy: &SitePolicy) -> String {
    if !m.stacks.contains_key(&stack) {
        return "(no stack)".into();
    }
    let all = frames(m, stack);
    let exe = &m.header.exe;
    let in_exe = |f: &Frame| {
        m.header
            .modules
            .iter()
            .find(|md| md.start <= f.addr && f.addr < md.end)
            .is_none_or(|md| &md.path == exe)
    };
    let named = all.iter().any(|f| f.sym.is_some());
    if named {
        // Frames of other modules (libc, libgcc) are never the user's.
        if let Some(f) = all
            .iter()
            .find(|f| f.sym.as_ref().is_some_and(|s| policy.is_users(s)) && in_exe(f))
        {
            return f.text(m);
        }
        let machinery = SitePolicy {
            keep: ["rayon", "tokio", "crossbeam", "hashbrown"].map(String::from).to_vec(),
            skip: Vec::new(),
        };
        if let Some(f) = all
            .iter()
            .find(|f| f.sym.as_ref().is_some_and(|s| machinery.is_users(s)))
        {
            return f.text(m);
        }
    }
    // No symbols: the first frame of the program's own executable that is
    // not one of the first three (heaptag's record and alloc frames).
    for f in all.iter().skip(3) {
        if f.sym.is_none()
            && m.header
                .modules
                .iter()
                .any(|md| md.start <= f.addr && f.addr < md.end && &md.path == exe)
        {
            return f.text(m);
        }
    }
    all.first().map_or_else(|| "(no stack)".into(), |f| f.text(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(function: &str, file: &str) -> Sym {
        Sym {
            function: function.into(),
            file: file.into(),
            line: 1,
        }
    }

    #[test]
    fn allocator_frames_are_not_the_users_program_frames_are() {
        let p = SitePolicy::default();
        for (f, file) in [
            ("backtrace::backtrace::libunwind::trace", ""),
            ("trace", "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/backtrace-0.3.77/src/backtrace/libunwind.rs"),
            ("heaptag_alloc::global::record", ""),
            ("<heaptag_alloc::global::Alloc<A> as core::alloc::global::GlobalAlloc>::alloc", ""),
            ("__rust_alloc", ""),
            ("__rustc::__rust_alloc", "/work/app/src/main.rs"),
            ("alloc::raw_vec::RawVec<T,A>::grow_one", ""),
            ("<T as alloc::vec::spec_from_elem::SpecFromElem>::from_elem", ""),
            ("clone", "/rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/library/alloc/src/vec/mod.rs"),
            ("rayon::iter::collect::special_extend", ""),
            ("rayon_core::scope::scope", ""),
            ("<rayon::iter::map::MapFolder<C,F> as rayon::iter::plumbing::Folder<T>>::consume_iter", ""),
            ("helper", "/c/registry/src/index.crates.io-x/rayon-1.12.0/src/iter/plumbing/mod.rs"),
            ("serde_json::to_vec", "/c/registry/src/index.crates.io-x/serde_json-1.0.1/src/ser.rs"),
            ("run", "/c/git/checkouts/tokio-abc123/0f3e1a2/tokio/src/runtime/task.rs"),
        ] {
            assert!(!p.is_users(&sym(f, file)), "{f} {file}");
        }
        for (f, file) in [
            ("pce_pipeline::build_pce", ""),
            ("<prover::Pce as core::clone::Clone>::clone", "/src/prover/src/main.rs"),
            ("dup_row", "/work/app/src/main.rs"),
            ("prover::main::{{closure}}", "src/main.rs"),
        ] {
            assert!(p.is_users(&sym(f, file)), "{f} {file}");
        }
    }

    #[test]
    fn keep_and_skip_change_what_is_the_users() {
        let p = SitePolicy::new(&["my-pool".into()], &["rayon".into()]);
        assert!(p.is_users(&sym("rayon::iter::collect::special_extend", "")));
        assert!(p.is_users(&sym("helper", "/c/registry/src/i/rayon-core-1.13.0/src/join/mod.rs")));
        assert!(!p.is_users(&sym("my_pool::Pool::run", "")));
        assert!(!p.is_users(&sym("alloc::vec::Vec<T>::clone", "")));
    }

    #[test]
    fn local_files_are_placed_by_their_manifest() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let own = root.join("allocator/src/global.rs");
        assert_eq!(
            crate_of_local_file(own.to_str().unwrap()).as_deref(),
            Some("heaptag_alloc")
        );
        let p = SitePolicy::default();
        assert!(
            !p.is_users(&sym("record", own.to_str().unwrap())),
            "heaptag's own frame"
        );
        // Examples and tests have no `src` above them; unknown paths stay the user's.
        let example = root.join("examples/pce_pipeline.rs");
        assert_eq!(crate_of_local_file(example.to_str().unwrap()), None);
        assert!(p.is_users(&sym("build_pce", example.to_str().unwrap())));
        assert!(p.is_users(&sym("work", "/nonexistent/prover/src/main.rs")));
    }

    #[test]
    fn crates_of_functions_and_files() {
        assert_eq!(
            crate_of_function("<[T] as alloc::slice::hack::ConvertVec>::to_vec"),
            Some("alloc")
        );
        assert_eq!(
            crate_of_function("<&mut I as core::iter::Iterator>::next"),
            Some("core")
        );
        assert_eq!(
            crate_of_function("<prover::Pce as core::clone::Clone>::clone"),
            Some("prover")
        );
        assert_eq!(crate_of_function("core::ptr::drop_in_place<prover::X>"), Some("core"));
        assert_eq!(crate_of_function("special_extend"), None);
        assert_eq!(crate_of_function("{closure#0}"), None);
        assert_eq!(crate_of_function("<"), None);
        assert_eq!(crate_of_function(""), None);
        assert_eq!(
            crate_of_file("/x/registry/src/index.crates.io-1949cf8c6b5b557f/rayon-core-1.13.0/src/lib.rs"),
            Some(("rayon_core".into(), true))
        );
        assert_eq!(
            crate_of_file("/rustc/abc/library/std/src/thread/mod.rs"),
            Some(("std".into(), true))
        );
        assert_eq!(crate_of_file("/work/app/src/main.rs"), None);
        assert_eq!(crate_of_file(""), None);
    }
}
