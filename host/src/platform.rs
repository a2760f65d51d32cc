//! What resmux keeps differently on the platform it was built for, said
//! once when `serve` starts. Each mechanism lives with what it serves (the
//! file grants, the watchers, the compile cache); the table of guarantees
//! per platform is docs/security.md's "Platforms".

/// The guarantees this platform keeps otherwise than Linux, in one line;
/// none on Linux.
pub fn differences() -> Option<&'static str> {
    if cfg!(windows) {
        Some(
            "on Windows, a single granted file is shown as a copy (a read-write one is \
             refused); a granted directory is preopened by the path its held handle has now, \
             so a rename between that lookup and the open could swap it; files a plugin \
             locates are read by the plugin itself; granted paths are watched by path; the \
             compile cache's access list is left to the folder's",
        )
    } else if cfg!(target_os = "macos") {
        Some(
            "on macOS, a single granted file is shown as a copy (a read-write one is \
             refused); files a plugin locates are read by the plugin itself; granted paths \
             are watched by path",
        )
    } else {
        None
    }
}

/// Logs [`differences`], if any, with where they are set out.
pub fn say_differences() {
    if let Some(differences) = differences() {
        tracing::warn!("{differences} (docs/security.md, Platforms)");
    }
}
