//! Embeds every file under the repository's `runtime/` directory (agent, functions,
//! input generators, checkers, recipe) into the library, so that the `thaw` binary is
//! self-contained and the root's content hash covers exactly these bytes.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name == "__pycache__" || name.ends_with(".pyc") || name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            walk(&p, base, out);
        } else {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().to_string();
            out.push((rel, p));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let runtime = manifest
        .join("../../runtime")
        .canonicalize()
        .expect("runtime/ dir");
    println!("cargo:rerun-if-changed={}", runtime.display());
    let mut files = Vec::new();
    walk(&runtime, &runtime, &mut files);
    let mut src = String::from("pub static RUNTIME_FILES: &[(&str, &[u8])] = &[\n");
    for (rel, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            src,
            "    ({rel:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    src.push_str("];\n");
    // Directories too, so that adding a file is noticed.
    let mut dirs = vec![runtime.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && p.file_name().unwrap() != "__pycache__" {
                println!("cargo:rerun-if-changed={}", p.display());
                dirs.push(p);
            }
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("runtime_files.rs");
    std::fs::write(out, src).unwrap();
}
