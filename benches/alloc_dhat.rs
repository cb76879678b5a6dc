//! Peer: the workloads under dhat-rs's heap profiler (a global mutex and a
//! backtrace per allocation). Writes its profile to `$DHAT_OUT` (or a file in
//! the temp dir) and reports its size.

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: dhat::Alloc = dhat::Alloc;

fn main() {
    let out = std::env::var("DHAT_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join(format!("dhat-{}.json", std::process::id())));
    let profiler = dhat::Profiler::builder().file_name(&out).build();
    common::main_with("dhat", false);
    drop(profiler);
    let bytes = std::fs::metadata(&out).map_or(0, |m| m.len());
    println!("dhat\tprofile_bytes\tbytes\t{bytes}\t0");
    let _ = std::fs::remove_file(&out);
}
