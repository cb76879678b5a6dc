//! Writes the crafted hostile logs of `gen.rs` into a folder:
//! `cargo run -p heaptag-analyzer --example hostile -- DIR`.

mod gen;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "hostile-logs".into());
    std::fs::create_dir_all(&dir).expect("create the folder");
    for (name, bytes) in gen::all() {
        let path = std::path::Path::new(&dir).join(format!("{name}.htlog"));
        std::fs::write(&path, &bytes).expect("write");
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
}
