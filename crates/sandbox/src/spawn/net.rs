//! The child's network on its egress veth, set up between clone and exec
//! with raw ioctls (no allocation, no library that might take a lock).
use super::{fail_step, STEP_EGRESS};
use crate::netns::{ifreq_of, interface_up};
use std::ffi::CString;
use std::os::fd::RawFd;

/// A sandbox's IPv6 on its veth: a /128 address, no link-local address and
/// no duplicate address detection (the block is the function's alone, and
/// an address in detection could not be used for a second).
pub(super) struct Net6 {
    pub(super) addr: libc::in6_addr,
    pub(super) gateway: libc::in6_addr,
    /// (sysctl file, value) written before the link comes up
    pub(super) sysctls: [(CString, &'static [u8]); 2],
}

/// `struct in6_rtmsg` of `<linux/ipv6_route.h>` (the `libc` crate's keeps
/// its fields private).
#[repr(C)]
struct In6Rtmsg {
    dst: libc::in6_addr,
    src: libc::in6_addr,
    gateway: libc::in6_addr,
    ty: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

pub(super) fn sockaddr(a: std::net::Ipv4Addr) -> libc::sockaddr_in {
    #[allow(clippy::cast_possible_truncation)] // AF_INET is 2
    const FAMILY: libc::sa_family_t = libc::AF_INET as libc::sa_family_t;
    libc::sockaddr_in {
        sin_family: FAMILY,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.octets()),
        },
        sin_zero: [0; 8],
    }
}

/// The child's end of its egress veth: its address as a /32, a host route to
/// the gateway (the bridge) and the default route through it, so everything
/// it sends is routed (and filtered) by the host. Raw ioctls only: it runs
/// between clone and exec.
///
/// # Safety
/// Called in the child with a datagram socket `s`; fails through `err_fd`.
pub(super) unsafe fn configure_egress(
    s: RawFd,
    addr: &libc::sockaddr_in,
    gateway: &libc::sockaddr_in,
    err_fd: RawFd,
) {
    let fail = || -> ! { fail_step(err_fd, STEP_EGRESS) };
    let as_sockaddr = |a: &libc::sockaddr_in| -> libc::sockaddr { std::mem::transmute_copy(a) };
    let host_mask = sockaddr(std::net::Ipv4Addr::BROADCAST);
    let mut ifr = ifreq_of(thaw_egress::SANDBOX_IF);
    ifr.ifr_ifru.ifru_addr = as_sockaddr(addr);
    if libc::ioctl(s, libc::SIOCSIFADDR, &ifr) != 0 {
        fail();
    }
    ifr.ifr_ifru.ifru_netmask = as_sockaddr(&host_mask);
    if libc::ioctl(s, libc::SIOCSIFNETMASK, &ifr) != 0 {
        fail();
    }
    if interface_up(s, thaw_egress::SANDBOX_IF).is_err() {
        fail();
    }
    let mut dev = ifreq_of(thaw_egress::SANDBOX_IF).ifr_name;
    let any = sockaddr(std::net::Ipv4Addr::UNSPECIFIED);
    let mut to_gateway: libc::rtentry = std::mem::zeroed();
    to_gateway.rt_dst = as_sockaddr(gateway);
    to_gateway.rt_genmask = as_sockaddr(&host_mask);
    to_gateway.rt_flags = libc::RTF_UP | libc::RTF_HOST;
    to_gateway.rt_dev = dev.as_mut_ptr();
    if libc::ioctl(s, libc::SIOCADDRT, &to_gateway) != 0 {
        fail();
    }
    let mut default: libc::rtentry = std::mem::zeroed();
    default.rt_dst = as_sockaddr(&any);
    default.rt_genmask = as_sockaddr(&any);
    default.rt_gateway = as_sockaddr(gateway);
    default.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    default.rt_dev = dev.as_mut_ptr();
    if libc::ioctl(s, libc::SIOCADDRT, &default) != 0 {
        fail();
    }
}

/// The child's IPv6 on its egress veth (up already, see [`configure_egress`]):
/// its /128 address, a host route to the gateway and the default route
/// through it, as for IPv4.
///
/// # Safety
/// Called in the child with a datagram socket `s`; fails through `err_fd`.
pub(super) unsafe fn configure_egress6(s: RawFd, n6: &Net6, err_fd: RawFd) {
    let fail = || -> ! { fail_step(err_fd, STEP_EGRESS) };
    let mut ifr = ifreq_of(thaw_egress::SANDBOX_IF);
    if libc::ioctl(s, libc::SIOCGIFINDEX, &mut ifr) != 0 {
        fail();
    }
    let ifindex = ifr.ifr_ifru.ifru_ifindex;
    let s6 = libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if s6 < 0 {
        fail();
    }
    let addr = libc::in6_ifreq {
        ifr6_addr: n6.addr,
        ifr6_prefixlen: 128,
        ifr6_ifindex: ifindex,
    };
    if libc::ioctl(s6, libc::SIOCSIFADDR, &addr) != 0 {
        fail();
    }
    let any = libc::in6_addr { s6_addr: [0; 16] };
    let route = |dst: libc::in6_addr, dst_len: u16, gateway: libc::in6_addr, flags: u16| In6Rtmsg {
        dst,
        src: any,
        gateway,
        ty: 0,
        dst_len,
        src_len: 0,
        metric: 0,
        info: 0,
        flags: flags as u32,
        ifindex,
    };
    let to_gateway = route(n6.gateway, 128, any, libc::RTF_UP);
    let default = route(any, 0, n6.gateway, libc::RTF_UP | libc::RTF_GATEWAY);
    if libc::ioctl(s6, libc::SIOCADDRT, &to_gateway) != 0
        || libc::ioctl(s6, libc::SIOCADDRT, &default) != 0
    {
        fail();
    }
    libc::close(s6);
}
