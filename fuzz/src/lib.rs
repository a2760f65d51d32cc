//! resmux's fuzz targets: one function for each kind of input resmux takes
//! from an untrusted side, each asserting what must hold whatever the input:
//! no panic, no hang, no allocation out of proportion to the input, and no
//! answer outside MCP's schema reaching a client.
//!
//! The binary `fuzz` (`src/bin/fuzz.rs`, built by `scripts/fuzz`) runs one
//! target under libFuzzer; the tests below replay every committed input of
//! `corpus/TARGET/` through the same function, as `cargo test` does in CI.

mod allocation;
mod answers;
mod arbitrary_answers;
mod cursor;
mod headers;
mod http_reads;
mod mcp_schema;
mod operator_files;
mod provider;
mod stdio;
mod uri;

/// One fuzz target: its name (its corpus folder) and the function an input
/// goes through.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: [Target; 7] = [
    Target {
        name: "answers",
        run: answers::run,
    },
    Target {
        name: "cursor",
        run: cursor::run,
    },
    Target {
        name: "headers",
        run: headers::run,
    },
    Target {
        name: "http_reads",
        run: http_reads::run,
    },
    Target {
        name: "operator_files",
        run: operator_files::run,
    },
    Target {
        name: "stdio",
        run: stdio::run,
    },
    Target {
        name: "uri",
        run: uri::run,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|target| target.name == name)
}

#[cfg(test)]
mod replay {
    use std::path::Path;

    use super::TARGETS;

    /// Every committed input of every target, seeds and the inputs of the
    /// bugs found, goes through its target without failing.
    #[test]
    fn the_committed_corpus_replays_clean() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        for target in &TARGETS {
            let folder = root.join(target.name);
            let mut inputs: Vec<_> = std::fs::read_dir(&folder)
                .unwrap_or_else(|error| panic!("{}: {error}", folder.display()))
                .map(|entry| entry.unwrap().path())
                .collect();
            inputs.sort();
            assert!(
                !inputs.is_empty(),
                "{} holds no seed for the target {}",
                folder.display(),
                target.name
            );
            for input in inputs {
                eprintln!("replaying {}", input.display());
                (target.run)(&std::fs::read(&input).unwrap());
            }
        }
    }
}
