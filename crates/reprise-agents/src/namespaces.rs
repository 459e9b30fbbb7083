//! Namespaces of an attempt's own: the walls Landlock does not build.
//!
//! Landlock confines what a contained program may open on the file system,
//! but not whom it may connect to over TCP, and not what it can read of
//! other processes in `/proc` (a worker's environment with its database
//! URL, reprise's command line, every run's control socket in
//! `/proc/net/unix`). So the supervisor, before it starts the program:
//!
//! 1. enters a user namespace of its own that maps the user to itself (an
//!    unprivileged user may then make the others), all of root's ids when
//!    reprise runs as root, so files keep their owners;
//! 2. has its next child start a PID namespace and, unless the plan grants
//!    every network, a network namespace: only a loopback, brought up here,
//!    on which it binds the listeners the driver serves from outside
//!    (`crate::network`, `crate::proxy`);
//! 3. in a mount namespace of its own, covers the trees the program may
//!    not see (the state directory, the audit key's directory) with an
//!    empty file system, and mounts back on it each tree inside them the
//!    program works in (its worktree, its `TMPDIR`, a rehearsal's home);
//! 4. in that child, between its fork and its exec ([`private_proc`]),
//!    makes a mount namespace again and mounts a `/proc` of the new PID
//!    namespace over the old one, so the program sees its own processes
//!    only (the supervisor keeps the old one: it follows its descendants
//!    there).
//!
//! Why the trees are covered rather than left out of the Landlock rules, as
//! they are without namespaces: Landlock skips a mount stacked on another
//! when it looks for the rule that grants a path, so the new `/proc` is
//! granted only by a rule on `/` itself, and `/` can be granted only when
//! nothing beneath it is hidden by the rules.
//!
//! The program is the new PID namespace's first process: when it exits,
//! the kernel kills everything left in the namespace, a `setsid` daemon
//! included, on top of the supervisor's own sweep. Its mounts cannot be
//! undone by the program: Landlock denies a contained process every mount
//! operation.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use rustix::thread::UnshareFlags;

/// What the supervisor's namespaces are to hold, as the driver asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NamespaceSpec {
    /// A network of its own listening on these addresses (inside), or
    /// `None` for the host's network.
    pub(crate) network: Option<Vec<SocketAddr>>,
    /// Trees covered by an empty file system.
    #[serde(default)]
    pub(crate) hidden: Vec<PathBuf>,
    /// Trees and files inside a hidden tree that stay as they are.
    #[serde(default)]
    pub(crate) shown: Vec<PathBuf>,
}

/// In the supervisor, before its program is spawned: enters a user
/// namespace and sets the program's PID (and, with `spec.network`, network)
/// namespaces up. The listeners bound inside, in the order asked, `None`
/// for an address that could not be bound (`::1` where IPv6 is off).
pub(crate) fn enter(spec: &NamespaceSpec) -> io::Result<Vec<Option<OwnedFd>>> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare(UnshareFlags::NEWUSER)?;
    map_ids(uid, gid)?;
    let mut flags = UnshareFlags::NEWPID;
    if spec.network.is_some() {
        flags |= UnshareFlags::NEWNET;
    }
    if !spec.hidden.is_empty() {
        flags |= UnshareFlags::NEWNS;
    }
    unshare(flags)?;
    if !spec.hidden.is_empty() {
        cover(&spec.hidden, &spec.shown)?;
    }
    let Some(addresses) = &spec.network else {
        return Ok(Vec::new());
    };
    loopback_up()?;
    Ok(addresses
        .iter()
        .map(|address| TcpListener::bind(address).ok().map(OwnedFd::from))
        .collect())
}

/// Covers each of `hidden` with an empty tmpfs, then mounts each of
/// `shown` that lies inside one back at its own path: its tree, cloned
/// before it was covered, on a directory (or file) made for it in the
/// tmpfs. A hidden tree that does not exist needs no cover.
fn cover(hidden: &[PathBuf], shown: &[PathBuf]) -> io::Result<()> {
    use rustix::fs::CWD;
    use rustix::mount::{
        MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, mount, mount_change,
        move_mount, open_tree,
    };
    // Nothing mounted here may reach the namespace it came from.
    mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )?;
    let mut covers: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|path| path.canonicalize().ok())
        .filter(|path| path.is_dir())
        .collect();
    covers.sort();
    covers.dedup_by(|inner, outer| inner.starts_with(&*outer));
    let mut kept: Vec<PathBuf> = shown
        .iter()
        .filter_map(|path| path.canonicalize().ok())
        .filter(|path| covers.iter().any(|cover| path.starts_with(cover)))
        .collect();
    kept.sort();
    kept.dedup_by(|inner, outer| inner.starts_with(&*outer));
    // Cloned while still visible: once covered, no path leads to them.
    let trees: Vec<(PathBuf, bool, OwnedFd)> = kept
        .into_iter()
        .map(|path| {
            let tree = open_tree(
                CWD,
                &path,
                OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
            )?;
            Ok((path.clone(), path.is_dir(), tree))
        })
        .collect::<io::Result<_>>()?;
    for cover in &covers {
        mount(
            "tmpfs",
            cover,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"mode=0700,size=1m",
        )?;
    }
    for (path, is_dir, tree) in trees {
        match (is_dir, path.parent()) {
            (true, _) => std::fs::create_dir_all(&path)?,
            (false, Some(parent)) => {
                std::fs::create_dir_all(parent)?;
                std::fs::File::create(&path)?;
            }
            (false, None) => continue,
        }
        move_mount(
            &tree,
            "",
            CWD,
            &path,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )?;
    }
    Ok(())
}

/// `unshare(2)` of namespaces only.
#[expect(unsafe_code)]
fn unshare(flags: UnshareFlags) -> io::Result<()> {
    debug_assert!(!flags.contains(UnshareFlags::FILES));
    // SAFETY: rustix marks unshare unsafe for CLONE_FILES, which would
    // leave other threads with descriptors this one no longer shares. Only
    // namespace flags are passed here, and the supervisor is
    // single-threaded.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)
}

/// Maps the user (and group) to itself in the user namespace just made:
/// as root, every id of the namespace reprise is in (so files of any owner
/// keep theirs), else, or where that is refused, the one id alone.
fn map_ids(uid: u32, gid: u32) -> io::Result<()> {
    if uid == 0
        && std::fs::write("/proc/self/uid_map", "0 0 4294967295\n").is_ok()
        && std::fs::write("/proc/self/gid_map", "0 0 4294967295\n").is_ok()
    {
        return Ok(());
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    // An unprivileged process may map its group only once setgroups(2) is
    // off for good in the namespace.
    std::fs::write("/proc/self/setgroups", "deny\n")?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Brings the new network namespace's loopback (always index 1) up, with
/// one rtnetlink request: `RTM_NEWLINK` setting `IFF_UP`.
fn loopback_up() -> io::Result<()> {
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    const IFF_UP: u32 = 1;
    const LOOPBACK_INDEX: i32 = 1;
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        // NETLINK_ROUTE is protocol 0, the default.
        None,
    )?;
    // struct nlmsghdr (16 bytes), then struct ifinfomsg (16 bytes).
    let mut request = [0u8; 32];
    request[0..4].copy_from_slice(&32u32.to_ne_bytes());
    request[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
    request[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    request[20..24].copy_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
    request[24..28].copy_from_slice(&IFF_UP.to_ne_bytes());
    request[28..32].copy_from_slice(&IFF_UP.to_ne_bytes());
    rustix::net::sendto(
        &socket,
        &request,
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut reply = [0u8; 512];
    let (read, _) = rustix::net::recv(&socket, &mut reply, RecvFlags::empty())?;
    // The acknowledgement is an NLMSG_ERROR whose code is 0 on success.
    if read < 20 || u16::from_ne_bytes([reply[4], reply[5]]) != NLMSG_ERROR {
        return Err(io::Error::other(
            "the kernel did not acknowledge the loopback's start",
        ));
    }
    let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
    if code != 0 {
        return Err(io::Error::from_raw_os_error(-code));
    }
    Ok(())
}

/// In the program's child side, between fork and exec, as the first process
/// of its PID namespace: a mount namespace of its own with a `/proc` of
/// that PID namespace mounted over the old one. System calls only, on
/// C strings that need no allocation.
#[expect(unsafe_code)]
pub(crate) fn private_proc() -> io::Result<()> {
    use rustix::mount::{MountFlags, MountPropagationFlags, mount, mount_change};
    // SAFETY: as in `unshare`: a namespace flag only, and the forked child
    // has the one thread.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }?;
    // Nothing mounted here may reach the namespace it came from.
    mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )?;
    mount(
        c"proc",
        c"/proc",
        c"proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )?;
    Ok(())
}
