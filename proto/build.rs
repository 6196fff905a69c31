//! Build script: generates rust-protobuf messages and async ttrpc bindings for
//! `schema/nri.proto` into `OUT_DIR` with ttrpc-codegen (pure-Rust parser, no protoc).
//!
//! The generated files carry inner attributes (`#![...]`, `//!`) which `include!`
//! cannot accept inside a module, so they are rewritten into `OUT_DIR/gen/*.rs`
//! with those lines removed and `super::nri::` paths pointed at our `api` module.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

fn main() -> io::Result<()> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").map_err(io::Error::other)?);
    let raw = out_dir.join("raw");
    let gen = out_dir.join("gen");
    fs::create_dir_all(&raw)?;
    fs::create_dir_all(&gen)?;

    println!("cargo:rerun-if-changed=schema/nri.proto");
    println!("cargo:rerun-if-changed=build.rs");

    ttrpc_codegen::Codegen::new()
        .out_dir(&raw)
        .input("schema/nri.proto")
        .include("schema")
        .rust_protobuf()
        .customize(ttrpc_codegen::Customize {
            async_all: true,
            ..Default::default()
        })
        .run()?;

    for name in ["nri.rs", "nri_ttrpc.rs"] {
        strip_inner_attributes(&raw.join(name), &gen.join(name))?;
    }
    Ok(())
}

fn strip_inner_attributes(from: &Path, to: &Path) -> io::Result<()> {
    let text = fs::read_to_string(from)?;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#![") || trimmed.starts_with("//!") {
            continue;
        }
        // The service file names the message module `super::nri`; ours is `api`.
        out.push_str(
            &line
                .replace("super::nri::", "super::api::")
                .replace("req, nri,", "req, api,"),
        );
        out.push('\n');
    }
    fs::write(to, out)
}
