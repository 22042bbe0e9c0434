//! Loopback ports for tests that start servers: whose listener is on a port.
//!
//! A test picks a free port by binding port 0 and closing it, then starts a server there. Two
//! tests doing so at once can be handed the same port; both servers try to bind it, one
//! fails, and a readiness check that only connects would find the winner for both tests. They
//! would then share one server, and the first to finish would kill it under the other.
//! [`listener_owned_by`] lets a readiness check insist on its own child's listener.

/// Whether process `pid` holds the IPv4 socket listening on `port`: the listening socket's
/// inode from `/proc/net/tcp` must be among the process's open files. `None` where `/proc`
/// cannot say (not Linux), and the caller falls back to trusting a connection.
pub fn listener_owned_by(pid: u32, port: u16) -> Option<bool> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let wanted = format!(":{port:04X}");
    // Columns: sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode.
    let listeners: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let on_port = fields.get(1).is_some_and(|local| local.ends_with(&wanted));
            let inode = fields.get(9)?;
            (listening && on_port).then(|| format!("socket:[{inode}]"))
        })
        .collect();
    if listeners.is_empty() {
        return Some(false);
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| listeners.iter().any(|l| target.as_os_str() == l.as_str()))
    }))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// The readiness check tells a listener of this process from one of another process on
    /// the same machine (a started redis-server), so two tests handed one port cannot share
    /// a server.
    #[test]
    fn a_listener_is_known_by_its_owner() {
        let ours = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = ours.local_addr().expect("addr").port();
        let me = std::process::id();
        if listener_owned_by(me, port).is_none() {
            eprintln!("no /proc here: listener ownership not checked");
            return;
        }
        assert_eq!(listener_owned_by(me, port), Some(true));
        drop(ours);
        assert_eq!(listener_owned_by(me, port), Some(false), "closed listener");
        let Some(server) = crate::redis::RedisServer::start_or_skip(&[], "listener ownership test")
        else {
            return;
        };
        assert_eq!(listener_owned_by(me, server.port()), Some(false));
        assert_eq!(listener_owned_by(server.pid(), server.port()), Some(true));
    }
}
