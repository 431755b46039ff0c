//! A private network namespace per test.

use std::process::Command;

/// Moves the calling thread into a new network namespace and brings its loopback up.
///
/// Network namespaces belong to threads: only this thread moves, and whatever it starts
/// afterwards (child processes, threads, a tokio runtime built here) lives in the namespace,
/// while other tests keep running in theirs. All of 127.0.0.0/8 is on `lo`, so servers can
/// bind 127.0.0.2, 127.0.0.3, ... Needs CAP_SYS_ADMIN (tests run as root).
pub fn enter_new() {
    // SAFETY: unshare(2) with CLONE_NEWNET only changes this thread's namespace membership.
    let result = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if result != 0 {
        panic!(
            "cannot create a network namespace (unshare CLONE_NEWNET): {}; the multi-process tests need root",
            std::io::Error::last_os_error()
        );
    }
    let status = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .unwrap_or_else(|e| panic!("running `ip link set lo up`: {e} (install Debian's iproute2)"));
    assert!(status.success(), "`ip link set lo up` failed in the new namespace: {status}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn namespace_is_private_to_the_thread_and_has_loopback() {
        std::thread::spawn(|| {
            super::enter_new();
            let listener = std::net::TcpListener::bind("127.0.0.7:4000").expect("bind in the namespace");
            let _client = std::net::TcpStream::connect("127.0.0.7:4000").expect("connect in the namespace");
            drop(listener);
        })
        .join()
        .expect("namespace thread");
        // The outer namespace never saw that listener.
        assert!(std::net::TcpStream::connect("127.0.0.7:4000").is_err());
    }
}
