//! Network namespaces for the fault tests: a three-member etcd whose members each run in a
//! namespace of their own, joined by a bridge in a fourth (the hub), with one veth from this
//! machine into the hub so that the processes under test (here, on 127.0.0.1) reach every
//! member. Every address is in 10.214.0.0/16, on interfaces the test creates; iptables rules
//! go only into a member's own namespace, so that cutting a member off from its peers touches
//! nothing else, and they vanish with the namespaces on drop (even when the test fails).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_repl_etcd::Control;

/// Run a command; its error output if it fails.
pub fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether the namespace tests can run here (root, `ip` and `tc`, `iptables`; and etcd if
/// `etcd`). Missing: a failure under `MNEMO_REQUIRE_TOOLS=1`, else a skip that says so.
pub fn available(etcd: bool) -> bool {
    let root = rustix::process::geteuid().is_root();
    let tools = Command::new("iptables").arg("-V").output().is_ok()
        && Command::new("ip").arg("-V").output().is_ok()
        && Command::new("tc").arg("-V").output().is_ok()
        && (!etcd
            || Command::new("etcd")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()));
    if root && tools {
        return true;
    }
    let needs = if etcd {
        "root, ip and tc (iproute2), iptables and etcd (etcd-server)"
    } else {
        "root, ip and tc (iproute2) and iptables"
    };
    assert!(
        std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "this fault test needs {needs} (MNEMO_REQUIRE_TOOLS=1)"
    );
    eprintln!("SKIPPED: this fault test needs {needs}");
    false
}

/// A namespace reached from here by one veth pair: this machine's end `host_addr`, the
/// namespace's `ns_addr` (a /30 of its own in 10.214.0.0/16); removed on drop.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub host_addr: String,
    pub ns_addr: String,
}

impl Netns {
    /// The namespace of slot `slot` (0 to 15; one per test, so that no two share a name or
    /// an address). Slots 8 and up are taken by [`NsEtcd`].
    pub fn create(slot: u32) -> Result<Netns, String> {
        let id = std::process::id() % 200 + 20;
        let name = format!("mnf{}-{slot}", std::process::id());
        let host_if = format!("mf{id}s{slot}a");
        let ns_if = format!("mf{id}s{slot}b");
        let host_addr = format!("10.214.{id}.{}", 4 * slot + 1);
        let ns_addr = format!("10.214.{id}.{}", 4 * slot + 2);
        let ns = Netns {
            name: name.clone(),
            host_if: host_if.clone(),
            host_addr: host_addr.clone(),
            ns_addr: ns_addr.clone(),
        };
        run(&["ip", "netns", "add", &name])?;
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        run(&["ip", "link", "set", &ns_if, "netns", &name])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_addr}/30"),
            "dev",
            &host_if,
        ])?;
        run(&["ip", "link", "set", &host_if, "up"])?;
        run(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            &format!("{ns_addr}/30"),
            "dev",
            &ns_if,
        ])?;
        run(&["ip", "-n", &name, "link", "set", &ns_if, "up"])?;
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Limit what this machine sends into the namespace to `rate` (tc's token bucket filter
    /// on the test's own veth end; removed with the link).
    pub fn rate_limit(&self, rate: &str) {
        run(&[
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.host_if,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "32kb",
            "latency",
            "1s",
        ])
        .expect("tc tbf on the test's veth");
    }

    /// iptables inside this namespace.
    pub fn iptables(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.name, "iptables"];
        all.extend_from_slice(args);
        run(&all).expect("iptables in the test's namespace");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// One etcd member in its namespace.
pub struct NsMember {
    child: Option<Child>,
    pub ns: String,
    pub addr: String,
    pub url: String,
    pub log: PathBuf,
}

impl NsMember {
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn iptables(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.ns, "iptables"];
        all.extend_from_slice(args);
        run(&all).expect("iptables in a member's namespace");
    }
}

/// A three-member etcd, each member in a namespace of its own (slot `slot`: 8 to 15), its
/// election timeout 400 ms (leases of 1 s) and pre-vote on, as
/// `mnemo_repl_etcd::testing::EtcdCluster`.
pub struct NsEtcd {
    pub members: Vec<NsMember>,
    /// This machine's address on the members' bridge (the source of every connection the
    /// processes here make to a member or to a node of [`NsEtcd::node`]).
    pub host_addr: String,
    hub: String,
    host_if: String,
    slot: u32,
    _dir: tempfile::TempDir,
}

impl NsEtcd {
    pub fn start(slot: u32) -> NsEtcd {
        assert!((8..16).contains(&slot), "slot {slot}");
        let pid = std::process::id();
        let id = pid % 200 + 20;
        let hub = format!("mnf{pid}-{slot}h");
        let host_if = format!("mf{id}s{slot}h");
        let hub_if = format!("mf{id}s{slot}j");
        let base = 16 * (slot - 8);
        let host_addr = format!("10.214.{}.{}", id, 128 + base + 1);
        let member_addr = |i: u32| format!("10.214.{}.{}", id, 128 + base + 2 + i);
        let dir = tempfile::Builder::new()
            .prefix("mnemo-nsetcd-")
            .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
                std::path::PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            })
            .unwrap();
        let mut etcd = NsEtcd {
            members: Vec::new(),
            host_addr: host_addr.clone(),
            hub: hub.clone(),
            host_if: host_if.clone(),
            slot,
            _dir: dir,
        };
        let must = |args: &[&str]| run(args).expect("building the test's namespaces");
        must(&["ip", "netns", "add", &hub]);
        must(&[
            "ip", "-n", &hub, "link", "add", "name", "mfbr", "type", "bridge",
        ]);
        must(&["ip", "-n", &hub, "link", "set", "mfbr", "up"]);
        must(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &hub_if,
        ]);
        must(&["ip", "link", "set", &hub_if, "netns", &hub]);
        must(&[
            "ip", "-n", &hub, "link", "set", &hub_if, "master", "mfbr", "up",
        ]);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("{host_addr}/28"),
            "dev",
            &host_if,
        ]);
        must(&["ip", "link", "set", &host_if, "up"]);
        let peers: Vec<String> = (0..3)
            .map(|i| format!("m{i}=http://{}:2380", member_addr(i)))
            .collect();
        for i in 0..3u32 {
            let ns = format!("mnf{pid}-{slot}m{i}");
            let (inner, outer) = (format!("mf{id}s{slot}m{i}"), format!("mf{id}s{slot}b{i}"));
            let addr = member_addr(i);
            must(&["ip", "netns", "add", &ns]);
            // Pushed now, so that the namespace goes on drop whatever fails next.
            etcd.members.push(NsMember {
                child: None,
                ns: ns.clone(),
                url: format!("http://{addr}:2379"),
                addr: addr.clone(),
                log: etcd._dir.path().join(format!("m{i}.log")),
            });
            must(&[
                "ip", "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ]);
            must(&["ip", "link", "set", &inner, "netns", &ns]);
            must(&["ip", "link", "set", &outer, "netns", &hub]);
            must(&[
                "ip", "-n", &hub, "link", "set", &outer, "master", "mfbr", "up",
            ]);
            must(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/28"),
                "dev",
                &inner,
            ]);
            must(&["ip", "-n", &ns, "link", "set", &inner, "up"]);
            must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        for i in 0..3 {
            let m = &etcd.members[i];
            let peer_url = format!("http://{}:2380", m.addr);
            let child = Command::new("ip")
                .args(["netns", "exec", &m.ns, "etcd"])
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(etcd._dir.path().join(format!("m{i}")))
                .args(["--listen-client-urls", &m.url])
                .args(["--advertise-client-urls", &m.url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &peers.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "mnemo-faults"])
                .args(["--heartbeat-interval", "50", "--election-timeout", "400"])
                // A member that rejoins after a cut must not depose the leader with the
                // term it raised while alone (etcd 3.5's default; 3.4 needs the flag).
                .arg("--pre-vote")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&m.log).unwrap())
                .spawn()
                .expect("etcd in its namespace");
            etcd.members[i].child = Some(child);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !etcd.members.iter().all(|m| healthy(&m.url)) {
            assert!(
                Instant::now() < deadline,
                "the etcd members did not answer:\n{}",
                std::fs::read_to_string(&etcd.members[0].log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }

    /// Each member's raft elections so far (its log's lines of a change of role or of
    /// leader: candidacies, leaders elected and lost), for a failure's message.
    pub fn elections(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let log = std::fs::read_to_string(&m.log).unwrap_or_default();
            out.push_str(&format!("member {i} ({}):\n", m.addr));
            let role = |l: &&str| {
                l.contains(" became ")
                    || l.contains(" elected leader ")
                    || l.contains(" lost leader ")
            };
            for line in log.lines().filter(role) {
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Every member's client URL, comma-separated (as `--etcd` takes them).
    pub fn urls(&self) -> String {
        let urls: Vec<&str> = self.members.iter().map(|m| m.url.as_str()).collect();
        urls.join(",")
    }

    /// Wait (at most 20 s) until every member names the same leader, twice 500 ms apart; its
    /// index. After a cut heals, the member that was alone may still believe it leads (and
    /// without pre-vote it would force an election with the term it raised): cutting
    /// another member then leaves two that are still electing, and a primary renewing
    /// through them waits out its TTL (a CI run at load 2 saw that, at the second cut of a
    /// schedule). A cluster at rest first.
    pub fn until_stable(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut agreed_before = None;
        loop {
            let views: Vec<Option<(u64, u64)>> = self
                .members
                .iter()
                .filter(|m| m.running())
                .map(|m| {
                    Control::connect(
                        std::slice::from_ref(&m.url),
                        "health",
                        Duration::from_millis(500),
                    )
                    .and_then(|c| c.member_status())
                    .ok()
                })
                .collect();
            let leader = views.first().copied().flatten().map(|(_, l)| l);
            let agreed = leader.filter(|&l| {
                l != 0 && views.iter().all(|v| v.is_some_and(|(_, other)| other == l))
            });
            match (agreed, agreed_before) {
                (Some(l), Some(before)) if l == before => {
                    if let Some(i) = views.iter().position(|v| v.is_some_and(|(m, _)| m == l)) {
                        return i;
                    }
                }
                _ => {}
            }
            agreed_before = agreed;
            assert!(
                Instant::now() < deadline,
                "the etcd members never agreed on a leader: {views:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Cut member `i` off from the other members, both ways (clients still reach it: it
    /// accepts their requests but, without a quorum, cannot answer them).
    pub fn isolate(&self, i: usize) {
        for (j, other) in self.members.iter().enumerate() {
            if j != i {
                let m = &self.members[i];
                m.iptables(&["-A", "INPUT", "-s", &other.addr, "-j", "DROP"]);
                m.iptables(&["-A", "OUTPUT", "-d", &other.addr, "-j", "DROP"]);
            }
        }
    }

    /// Cut member `i` off from the other members one way: what it sends them is dropped
    /// (their packets reach it, its answers and TCP acknowledgements do not go back).
    pub fn isolate_one_way(&self, i: usize) {
        for (j, other) in self.members.iter().enumerate() {
            if j != i {
                self.members[i].iptables(&["-A", "OUTPUT", "-d", &other.addr, "-j", "DROP"]);
            }
        }
    }

    /// A namespace of its own on the members' bridge (node `k`, 0 to 6), for a process under
    /// test that iptables must cut off from some peers and not others: it reaches every
    /// member and this machine directly, on the members' /28; removed on drop.
    pub fn node(&self, k: u32) -> NsNode {
        assert!(k < 7, "node {k}");
        let pid = std::process::id();
        let id = pid % 200 + 20;
        let slot = self.slot;
        let name = format!("mnf{pid}-{slot}n{k}");
        let (inner, outer) = (format!("mf{id}s{slot}n{k}"), format!("mf{id}s{slot}o{k}"));
        let addr = format!("10.214.{id}.{}", 128 + 16 * (slot - 8) + 8 + k);
        let must = |args: &[&str]| run(args).expect("building the test's namespaces");
        must(&["ip", "netns", "add", &name]);
        let node = NsNode {
            name: name.clone(),
            addr: addr.clone(),
        };
        must(&[
            "ip", "link", "add", &inner, "type", "veth", "peer", "name", &outer,
        ]);
        must(&["ip", "link", "set", &inner, "netns", &name]);
        must(&["ip", "link", "set", &outer, "netns", &self.hub]);
        must(&[
            "ip", "-n", &self.hub, "link", "set", &outer, "master", "mfbr", "up",
        ]);
        must(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            &format!("{addr}/28"),
            "dev",
            &inner,
        ]);
        must(&["ip", "-n", &name, "link", "set", &inner, "up"]);
        must(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        node
    }

    /// Undo every cut.
    pub fn heal(&self) {
        for m in &self.members {
            m.iptables(&["-F"]);
        }
    }
}

impl Drop for NsEtcd {
    fn drop(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
        let _ = run(&["ip", "link", "del", &self.host_if]);
        for m in &self.members {
            let _ = run(&["ip", "netns", "del", &m.ns]);
        }
        let _ = run(&["ip", "netns", "del", &self.hub]);
    }
}

/// A namespace on the members' bridge ([`NsEtcd::node`]): a process run in it (`ip netns
/// exec`) listens on `addr`; iptables rules go into this namespace only.
pub struct NsNode {
    pub name: String,
    pub addr: String,
}

impl NsNode {
    /// iptables inside this namespace.
    pub fn iptables(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.name, "iptables"];
        all.extend_from_slice(args);
        run(&all).expect("iptables in the node's namespace");
    }

    /// Drop what this node receives from `peer` (`inbound`) and what it sends to `peer`
    /// (`outbound`).
    pub fn cut(&self, peer: &str, inbound: bool, outbound: bool) {
        if inbound {
            self.iptables(&["-A", "INPUT", "-s", peer, "-j", "DROP"]);
        }
        if outbound {
            self.iptables(&["-A", "OUTPUT", "-d", peer, "-j", "DROP"]);
        }
    }

    /// Undo every cut of this node.
    pub fn heal(&self) {
        self.iptables(&["-F"]);
    }
}

impl Drop for NsNode {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// Whether the etcd at `url` answers a request (its leader elected).
fn healthy(url: &str) -> bool {
    Control::connect(&[url.to_string()], "health", Duration::from_millis(500)).is_ok()
}
