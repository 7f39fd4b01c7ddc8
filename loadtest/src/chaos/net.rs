//! The network under `chaos`: the run moves into a network namespace of its own before it
//! starts anything, so its servers and etcd listen there and every rule it adds goes when it
//! does. Each group of nodes (one swarm process) lives in a namespace of its own behind a veth
//! pair, as a rack behind one link, and reaches each server at an address of its own
//! ([`serving_ip`]).
//!
//! The faults are the kernel's own: iptables rules in the run's namespace drop a group's
//! packets (all of them: a partition; a random share: a lossy link), the servers' end of a
//! group's connections is destroyed while its packets are dropped (`ss -K`: the reset never
//! arrives, so the nodes hold half-open connections), and a replica's own loopback address
//! to the datastore is cut (a replica partitioned from its datastore while its nodes still
//! reach it).
//! Added delay would be `tc netem`'s, but this machine's kernel has no netem
//! (`CONFIG_NET_SCH_NETEM` is not set): a group's packets go through Netfilter's queue to a
//! thread of this process that holds each for the delay and then lets it go ([`Delay`]).

use std::collections::VecDeque;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Most replicas a run with network faults can have: each serves at an address of its own
/// ([`serving_ip`]) and reaches the datastore at another ([`replica_ip`]; the API server's
/// certificate names 16).
pub(crate) const MAX_REPLICAS: usize = 16;

/// The address replica `i` serves the nodes at, as a pod's address behind a Service: on the
/// run namespace's loopback, routed to over each group's link.
pub(crate) fn serving_ip(i: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 77, 0, u8::try_from(i + 1).unwrap_or(u8::MAX))
}

/// Namespace names start with this, then the run's process id.
const PREFIX: &str = "typha-chaos-";

/// Runs a command, failing with what it printed.
fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} (Debian packages iproute2, iptables)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Moves this process into a new network namespace with its loopback up and the replicas'
/// serving addresses on it. Call it before any thread starts: a namespace belongs to the thread that enters it,
/// and threads started later inherit it.
pub(crate) fn isolate() -> anyhow::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).context(
        "entering a network namespace of its own (unshare): chaos needs root for its network \
         faults; --no-net runs without them",
    )?;
    run("ip", &["link", "set", "lo", "up"])?;
    for i in 0..MAX_REPLICAS {
        run(
            "ip",
            &["addr", "add", &format!("{}/32", serving_ip(i)), "dev", "lo"],
        )?;
    }
    remove_leftovers();
    Ok(())
}

/// Deletes the group namespaces of earlier runs that are gone (a killed run leaves them).
fn remove_leftovers() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", &name]);
        }
    }
}

/// A group of nodes' namespace and link; deleted when dropped.
pub(crate) struct Group {
    /// The namespace's name (`ip netns`).
    pub(crate) netns: String,
    /// The group's address, as the servers see its connections.
    addr: String,
    /// Its number: its Netfilter queue's is one more.
    index: usize,
    /// The rules in force against it, to take out again.
    rules: Vec<Vec<String>>,
}

impl Group {
    /// Group `g` (below 250): namespace, veth pair, addresses `10.78.g.1` (this side) and
    /// `10.78.g.2` (the group's), and the group's default route over it.
    pub(crate) fn new(g: usize) -> anyhow::Result<Group> {
        anyhow::ensure!(g < 250, "at most 250 groups of nodes");
        let netns = format!("{PREFIX}{}-{g}", std::process::id());
        let _ = run("ip", &["netns", "del", &netns]);
        run("ip", &["netns", "add", &netns])?;
        let group = Group {
            addr: format!("10.78.{g}.2"),
            netns,
            index: g,
            rules: Vec::new(),
        };
        let here = format!("cg{g}");
        run(
            "ip",
            &[
                "link",
                "add",
                &here,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &group.netns,
            ],
        )?;
        run(
            "ip",
            &["addr", "add", &format!("10.78.{g}.1/24"), "dev", &here],
        )?;
        run("ip", &["link", "set", &here, "up"])?;
        let inside = |args: &[&str]| {
            let mut a = vec!["netns", "exec", &group.netns, "ip"];
            a.extend_from_slice(args);
            run("ip", &a)
        };
        inside(&["addr", "add", &format!("{}/24", group.addr), "dev", "eth0"])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        inside(&["route", "add", "default", "via", &format!("10.78.{g}.1")])?;
        Ok(group)
    }

    /// Drops every packet to and from the group (`on`), or lets them through again.
    pub(crate) fn partition(&mut self, on: bool) -> anyhow::Result<()> {
        self.set(on.then_some(100))
    }

    /// Drops this share of the packets each way, at random (`Some(percent)`), or none.
    pub(crate) fn lossy(&mut self, percent: Option<u32>) -> anyhow::Result<()> {
        self.set(percent)
    }

    fn set(&mut self, percent: Option<u32>) -> anyhow::Result<()> {
        for rule in std::mem::take(&mut self.rules) {
            iptables("-D", &rule)?;
        }
        let Some(p) = percent else {
            return Ok(());
        };
        for (chain, dir) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            let mut rule: Vec<String> = vec![chain.into(), dir.into(), self.addr.clone()];
            if p < 100 {
                rule.extend(
                    [
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &format!("{:.2}", f64::from(p) / 100.0),
                    ]
                    .map(String::from),
                );
            }
            rule.extend(["-j", "DROP"].map(String::from));
            iptables("-I", &rule)?;
            self.rules.push(rule);
        }
        Ok(())
    }

    /// Holds every packet to and from the group for `by` (so a round trip takes `2 × by`
    /// longer) until the returned [`Delay`] is dropped. Rules added later (a lossy link) come
    /// before it, so a packet they drop is not held first.
    pub(crate) fn delayed(&self, by: Duration) -> anyhow::Result<Delay> {
        let queue = u16::try_from(self.index + 1).context("queue number")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("delay-{}", self.index))
            .spawn(move || hold(queue, by, &s2, &ready_tx))
            .context("starting the delay thread")?;
        let mut delay = Delay {
            rules: Vec::new(),
            stop,
            thread: Some(thread),
        };
        // The queue is bound before any packet goes to it (and `--queue-bypass` lets packets
        // through whenever nothing is bound).
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("binding Netfilter queue {queue}: {e}"),
            Err(_) => bail!("the delay thread did not bind Netfilter queue {queue}"),
        }
        let q = queue.to_string();
        for (chain, dir) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            let rule: Vec<String> = [
                chain,
                dir,
                &self.addr,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &q,
                "--queue-bypass",
            ]
            .map(String::from)
            .to_vec();
            iptables("-I", &rule)?;
            delay.rules.push(rule);
        }
        Ok(delay)
    }

    /// Makes every connection from the group half-open: while its packets are dropped, the
    /// servers' end of each is destroyed (`ss -K`, which sends a reset the drop swallows);
    /// when the packets flow again the nodes still hold connections the servers no longer
    /// know. Returns how many the servers held.
    pub(crate) fn half_open(&mut self) -> anyhow::Result<usize> {
        self.partition(true)?;
        let filter = ["-Htn", "state", "established", "dst", self.addr.as_str()];
        let held = run("ss", &filter).map(|o| o.lines().count());
        let killed = held.and_then(|n| {
            let mut a = vec!["-K"];
            a.extend_from_slice(&filter);
            run("ss", &a).map(|_| n)
        });
        // Let the packets through again whatever happened.
        self.partition(false)?;
        killed
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = self.set(None);
        // Deleting the namespace deletes its end of the link, and with it this one.
        let _ = run("ip", &["netns", "del", &self.netns]);
    }
}

/// A group's packets held in user space; lifted (every held packet let go) when dropped.
pub(crate) struct Delay {
    rules: Vec<Vec<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<u64>>>,
}

impl Delay {
    /// Lifts it; returns how many packets it held.
    pub(crate) fn lift(mut self) -> anyhow::Result<u64> {
        self.stop_now()
    }

    fn stop_now(&mut self) -> anyhow::Result<u64> {
        for rule in std::mem::take(&mut self.rules) {
            iptables("-D", &rule)?;
        }
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the delay thread panicked"),
            None => Ok(0),
        }
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        let _ = self.stop_now();
    }
}

/// The delay thread: binds Netfilter queue `queue`, says so on `ready`, then holds every
/// packet it is given for `by` and accepts it, in order, until `stop`; then lets every held
/// packet go. Returns how many it held.
fn hold(
    queue: u16,
    by: Duration,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<std::io::Result<()>>,
) -> anyhow::Result<u64> {
    let bound: std::io::Result<nfq::Queue> = (|| {
        let mut q = nfq::Queue::open()?;
        q.bind(queue)?;
        // The packets' metadata only: the kernel keeps each packet until its verdict.
        q.set_copy_range(queue, 0)?;
        q.set_queue_max_len(queue, 1 << 16)?;
        q.set_fail_open(queue, true)?;
        q.set_nonblocking(true);
        Ok(q)
    })();
    let mut q = match bound {
        Ok(q) => {
            let _ = ready.send(Ok(()));
            q
        }
        Err(e) => {
            let msg = e.to_string();
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    let mut count = 0u64;
    loop {
        loop {
            match q.recv() {
                Ok(mut m) => {
                    m.set_verdict(nfq::Verdict::Accept);
                    held.push_back((Instant::now() + by, m));
                    count += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading Netfilter queue"),
            }
        }
        let stopping = stop.load(Ordering::Relaxed);
        let now = Instant::now();
        while let Some((due, _)) = held.front() {
            if *due > now && !stopping {
                break;
            }
            if let Some((_, m)) = held.pop_front() {
                q.verdict(m).context("letting a held packet go")?;
            }
        }
        if stopping {
            let _ = q.unbind(queue);
            return Ok(count);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn iptables(op: &str, rule: &[String]) -> anyhow::Result<()> {
    let mut a = vec!["-w", op];
    a.extend(rule.iter().map(String::as_str));
    run("iptables", &a).map(|_| ())
}

/// The loopback address replica `i` reaches the datastore at: one of its own, so that it
/// alone can be cut off ([`Cut`]).
pub(crate) fn replica_ip(i: usize) -> String {
    format!("127.0.1.{}", i + 1)
}

/// A replica cut off from the datastore: every packet to and from the datastore's port at the
/// replica's own address dropped, while its nodes still reach it. Lifted when dropped.
pub(crate) struct Cut {
    rules: Vec<Vec<String>>,
}

impl Cut {
    /// Cuts replica `i` off from the datastore listening on `port`.
    pub(crate) fn new(i: usize, port: &str) -> anyhow::Result<Cut> {
        let ip = replica_ip(i);
        let mut cut = Cut { rules: Vec::new() };
        for (dir, pdir) in [("-d", "--dport"), ("-s", "--sport")] {
            let rule: Vec<String> = ["INPUT", dir, &ip, "-p", "tcp", pdir, port, "-j", "DROP"]
                .map(String::from)
                .to_vec();
            iptables("-I", &rule)?;
            cut.rules.push(rule);
        }
        Ok(cut)
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for rule in &self.rules {
            let _ = iptables("-D", rule);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds a TCP connect from the group to `port` on replica 0's address takes (one
    /// round trip), or `None` if it does not connect within a second.
    fn connect_secs(g: &Group, port: u16) -> Option<f64> {
        connect_to(g, serving_ip(0), port)
    }

    fn connect_to(g: &Group, ip: std::net::Ipv4Addr, port: u16) -> Option<f64> {
        let script = format!(
            "import socket,time\nt=time.time()\ntry:\n socket.create_connection(('{ip}',{port}),timeout=1)\n print(time.time()-t)\nexcept OSError:\n print('none')"
        );
        let out = run("ip", &["netns", "exec", &g.netns, "python3", "-c", &script]).unwrap();
        out.trim().parse().ok()
    }

    /// The faults do what they say, in namespaces of their own: this test's thread enters
    /// one (a namespace is a thread's), and its group's is deleted at the end.
    #[test]
    fn a_group_is_reached_delayed_and_cut_off() {
        isolate().unwrap();
        let listener = std::net::TcpListener::bind((serving_ip(0), 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        // The last replica's address, on the same port, as replicas behind a Service.
        let last = serving_ip(MAX_REPLICAS - 1);
        let _other = std::net::TcpListener::bind((last, port)).unwrap();
        let mut g = Group::new(249).unwrap();
        assert!(
            connect_secs(&g, port).is_some(),
            "the group reaches a replica"
        );
        assert!(
            connect_to(&g, last, port).is_some(),
            "and every other replica"
        );

        let delay = g.delayed(Duration::from_millis(60)).unwrap();
        let took = connect_secs(&g, port).unwrap();
        // A lower bound only: the delay adds at least this much to a round trip.
        assert!(
            took >= 0.12,
            "a round trip took {took} s under a 60 ms delay each way"
        );
        assert!(
            delay.lift().unwrap() >= 2,
            "the SYN and its answer were held"
        );

        g.partition(true).unwrap();
        assert_eq!(connect_secs(&g, port), None, "cut off");
        g.partition(false).unwrap();
        assert!(connect_secs(&g, port).is_some(), "reached again");

        g.lossy(Some(50)).unwrap();
        g.lossy(None).unwrap();
        assert!(
            connect_secs(&g, port).is_some(),
            "lifting a lossy link lets all through"
        );
        let ns = g.netns.clone();
        drop(g);
        assert!(!std::path::Path::new(&format!("/run/netns/{ns}")).exists());
    }
}
