//! Which addresses count as public. Everything else (loopback, private,
//! link-local, shared, documentation, benchmarking, reserved, multicast and
//! unspecified ranges, and IPv6 forms that embed such an IPv4 address) is
//! reachable only through a grant that names the address itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is a globally routed unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let special = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240;
    !special
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let embedded_v4 = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match segments {
        // 64:ff9b::/96 (NAT64) and 2002::/16 (6to4) carry an IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => is_public_v4(embedded_v4(high, low)),
        [0x2002, high, low, ..] => is_public_v4(embedded_v4(high, low)),
        // ::/96 holds the unspecified, loopback and IPv4-compatible addresses.
        [0, 0, 0, 0, 0, 0, _, _] => false,
        [first, second, ..] => {
            let unique_local = first & 0xfe00 == 0xfc00;
            let link_local = first & 0xffc0 == 0xfe80;
            let documentation = first == 0x2001 && second == 0x0db8;
            !(ip.is_multicast() || unique_local || link_local || documentation)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for address in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "64:ff9b::a00:1",
            "2002:c0a8:101::1",
        ] {
            assert!(!is_public(address.parse().unwrap()), "{address}");
        }
    }

    #[test]
    fn global_addresses_are_public() {
        for address in [
            "93.184.215.14",
            "8.8.8.8",
            "::ffff:8.8.8.8",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(address.parse().unwrap()), "{address}");
        }
    }
}
