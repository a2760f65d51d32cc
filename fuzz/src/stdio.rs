//! Target `stdio`: bytes on a stdio server's stdin, arriving in any chunks.
//! The loop cuts them into the same lines however they arrive; each line
//! decodes without a panic; and wherever resmux's own decoder takes a line
//! (the requests a client sends over and over), it decodes it exactly as
//! rmcp's decoder would.

use arbitrary::Unstructured;
use resmux::fuzzing::{
    STDIO_MAX_LINE_BYTES, StdioLine, rmcp_decoding, stdio_fast_path, stdio_frames, stdio_line,
};

pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let cuts: Vec<u16> = (0..input.int_in_range(0..=4).unwrap_or(0))
        .map(|_| input.arbitrary().unwrap_or(0))
        .collect();
    let bytes = input.take_rest();
    let mut chunks = Vec::new();
    let mut rest = bytes;
    for cut in cuts {
        let (chunk, after) = rest.split_at(usize::from(cut).min(rest.len()));
        chunks.push(chunk);
        rest = after;
    }
    chunks.push(rest);

    let frames = stdio_frames(chunks.iter().copied());
    let mut whole: Vec<&[u8]> = bytes.split(|byte| *byte == b'\n').collect();
    // What follows the last newline is cut off, never delivered.
    whole.pop();
    let expected: Vec<Option<Vec<u8>>> = whole
        .iter()
        .map(|line| (line.len() <= STDIO_MAX_LINE_BYTES).then(|| line.to_vec()))
        .collect();
    assert_eq!(frames, expected, "lines depend on how the bytes arrived");

    for line in frames.iter().flatten() {
        decoded(line);
    }
    decoded(bytes);
}

fn decoded(line: &[u8]) {
    let taken = stdio_line(line);
    let Some(fast) = stdio_fast_path(line) else {
        return;
    };
    let by_rmcp = rmcp_decoding(line);
    assert_eq!(
        Some(&fast),
        by_rmcp.as_ref(),
        "resmux's decoder and rmcp's disagree on {:?}",
        String::from_utf8_lossy(line)
    );
    assert_eq!(taken, StdioLine::Message(fast));
}
