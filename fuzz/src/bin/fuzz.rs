//! Runs one of resmux's fuzz targets under libFuzzer: the one named by
//! `RESMUX_FUZZ_TARGET` (scripts/fuzz sets it, and names them all).
#![no_main]

use std::sync::LazyLock;

static TARGET: LazyLock<&'static resmux_fuzz::Target> = LazyLock::new(|| {
    let name = std::env::var("RESMUX_FUZZ_TARGET").unwrap_or_default();
    resmux_fuzz::target(&name).unwrap_or_else(|| {
        let names: Vec<_> = resmux_fuzz::TARGETS
            .iter()
            .map(|target| target.name)
            .collect();
        eprintln!("RESMUX_FUZZ_TARGET must name one of: {}", names.join(", "));
        std::process::exit(2)
    })
});

libfuzzer_sys::fuzz_target!(|data: &[u8]| (TARGET.run)(data));
