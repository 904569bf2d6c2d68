//! The listen-address flag group (`--address` of the metrics and health endpoints, as upstream).

use std::net::SocketAddr;

/// `--address` is not `HOST:PORT` or `:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid listen address {address:?}: {source}")]
pub struct ListenAddressError {
    /// The address as given.
    pub address: String,
    /// The parse failure.
    pub source: std::net::AddrParseError,
}

/// Where the metrics and health endpoints listen. Each binary sets its own default (upstream's port) with
/// `#[command(mut_arg("address", |a| a.default_value(":PORT")))]`.
#[derive(Clone, Debug, clap::Args)]
pub struct ListenFlags {
    /// Listen address of the metrics and health endpoints; `:PORT` means all interfaces.
    #[arg(long, default_value = ":8080")]
    pub address: String,
}

impl ListenFlags {
    /// The socket address (`:PORT` → `0.0.0.0:PORT`).
    pub fn socket_addr(&self) -> Result<SocketAddr, ListenAddressError> {
        parse_listen_addr(&self.address)
    }
}

/// Parses `HOST:PORT`, or `:PORT` for all interfaces.
pub fn parse_listen_addr(address: &str) -> Result<SocketAddr, ListenAddressError> {
    let full = if address.starts_with(':') {
        format!("0.0.0.0{address}")
    } else {
        address.to_owned()
    };
    full.parse().map_err(|source| ListenAddressError {
        address: address.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_addr(":8944"),
            Ok("0.0.0.0:8944".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:1"),
            Ok("127.0.0.1:1".parse().unwrap())
        );
        assert_eq!(parse_listen_addr("[::1]:2"), Ok("[::1]:2".parse().unwrap()));
        assert!(parse_listen_addr("nope").is_err());
    }
}
