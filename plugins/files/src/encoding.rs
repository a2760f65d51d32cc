//! Percent-encoding of file names into URI paths, and back.

use resmux_sdk::Error;

/// Encodes a relative file path for a URI: `/` separates segments, unreserved
/// characters stay, every other byte becomes `%XX`.
pub fn encode(relative: &str) -> String {
    let mut encoded = String::with_capacity(relative.len());
    for byte in relative.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Decodes a URI path into a relative file path.
pub fn decode(path: &str) -> Result<String, Error> {
    let invalid = || Error::InvalidInput(format!("{path:?} is not a valid percent-encoded path"));
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = path.get(index + 1..index + 3).ok_or_else(invalid)?;
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| invalid())?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| invalid())
}
