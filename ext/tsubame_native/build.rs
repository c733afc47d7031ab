//! Link options for the extension.
//!
//! Packed relative relocations (`DT_RELR`): the extension's 500 KB of
//! `.rela.dyn` become about 13 KB. The dynamic loader reads every entry
//! once at `require`, so those pages stayed resident in each server
//! process for nothing (0.3-0.4 MB of RSS per process). They need GNU ld
//! 2.38 and glibc 2.36 (Debian 12); where a probe program built with them
//! does not link and run, the extension is linked as before.

use std::path::PathBuf;
use std::process::Command;

const FLAG: &str = "-Wl,-z,pack-relative-relocs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    if packed_relocations_work() {
        println!("cargo:rustc-cdylib-link-arg={FLAG}");
    } else {
        println!("cargo:warning=linking without packed relative relocations (needs GNU ld 2.38, glibc 2.36)");
    }
}

/// Links a small program with the flag and runs it: the linker must take
/// the flag without a warning, and this machine's loader must load the
/// result. A cross build (another target than the host) keeps the default.
fn packed_relocations_work() -> bool {
    if std::env::var("TARGET").ok() != std::env::var("HOST").ok() {
        return false;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("relr_probe.c");
    let program = out.join("relr_probe");
    // A pointer in initialised data: a relative relocation to pack.
    let code = "static const char *p = \"x\";\nint main(void) { return p[0] == 'x' ? 0 : 1; }\n";
    if std::fs::write(&source, code).is_err() {
        return false;
    }
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let linked = Command::new(compiler)
        .args(["-fPIE", "-pie", FLAG, "-o"])
        .arg(&program)
        .arg(&source)
        .output();
    match linked {
        // GNU ld only warns about a `-z` option it does not know.
        Ok(o) if o.status.success() && !String::from_utf8_lossy(&o.stderr).contains("warning") => {}
        _ => return false,
    }
    Command::new(&program).status().is_ok_and(|s| s.success())
}
