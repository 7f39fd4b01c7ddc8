//! Binding the listeners. "All interfaces" (an empty `TYPHA_SERVERHOST`, `TYPHA_HEALTHHOST`,
//! `TYPHA_PROMETHEUSMETRICSHOST`) is [`ALL`]: one IPv6 socket with `IPV6_V6ONLY` off, which
//! takes IPv4 clients too (as IPv4-mapped addresses), as Go's `net.Listen("tcp", ":5473")`
//! does for Calico's Typha. So IPv6-only and dual-stack clusters reach it, whatever the
//! host's `net.ipv6.bindv6only`. On a host without IPv6 (the kernel's `ipv6.disable=1`) it
//! falls back to IPv4's `0.0.0.0`. An explicit address (`0.0.0.0`, `::`, one address) is
//! bound as it is given: `0.0.0.0` is IPv4 only, `::` both.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// All interfaces, IPv6 and IPv4: where an empty host setting listens.
pub const ALL: Ipv6Addr = Ipv6Addr::UNSPECIFIED;

/// As many pending connections as the kernel allows (it caps the backlog at `somaxconn`): a
/// reconnect storm of thousands of agents arrives at once.
const BACKLOG: i32 = 4096;

/// A listener on `addr`; `[::]` takes IPv4 clients too (see the module's doc).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            match Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)) {
                Ok(s) => dual_stack(s, addr)?,
                // No IPv6 on this host: IPv4 is all there is.
                Err(e) => {
                    tracing::info!(port = a.port(), error = %e, "no IPv6 on this host: listening on IPv4 only");
                    plain(SocketAddr::from((Ipv4Addr::UNSPECIFIED, a.port())))?
                }
            }
        }
        _ => plain(addr)?,
    };
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

/// The IPv6 socket `s`, taking IPv4 clients too, bound to `addr`.
fn dual_stack(s: Socket, addr: SocketAddr) -> io::Result<Socket> {
    s.set_only_v6(false)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// A socket bound to `addr` as it is.
fn plain(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's `TcpListener::bind`: a restarted server binds its port while the old
    // connections are in TIME_WAIT.
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_interfaces_take_ipv6_and_ipv4_clients_and_an_explicit_address_only_its_own() {
        let l = bind(SocketAddr::from((ALL, 0))).unwrap();
        let port = l.local_addr().unwrap().port();
        for client in [
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        ] {
            let c = tokio::net::TcpStream::connect(client).await.unwrap();
            let (_, from) = l.accept().await.unwrap();
            assert_eq!(from.port(), c.local_addr().unwrap().port(), "{client}");
        }
        let v4 = bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).unwrap();
        let port = v4.local_addr().unwrap().port();
        assert!(
            tokio::net::TcpStream::connect((Ipv6Addr::LOCALHOST, port))
                .await
                .is_err(),
            "0.0.0.0 is IPv4 only"
        );
    }
}
