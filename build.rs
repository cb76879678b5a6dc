//! With the `native` feature, compiles the C and C++ of the native tests
//! (`tests/native/`) and links them into this crate's test binaries only
//! (never into the library or a user's program).

fn main() {
    println!("cargo:rerun-if-changed=tests/native");
    if std::env::var_os("CARGO_FEATURE_NATIVE").is_none() || !std::path::Path::new("tests/native").exists() {
        return;
    }
    let objects_c = cc::Build::new()
        .file("tests/native/buffers.c")
        .warnings(true)
        .cargo_metadata(false)
        .compile_intermediates();
    let objects_cpp = cc::Build::new()
        .cpp(true)
        .file("tests/native/vectors.cpp")
        .warnings(true)
        .cargo_metadata(false)
        .compile_intermediates();
    // Object files (not an archive): always linked, so the C constructor
    // runs before main in every test binary.
    for o in objects_c.iter().chain(&objects_cpp) {
        println!("cargo:rustc-link-arg-tests={}", o.display());
    }
    println!("cargo:rustc-link-arg-tests=-lstdc++");
}
