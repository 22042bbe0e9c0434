//! The control plane against a real etcd (started by the test on free loopback ports; the
//! tests are skipped, loudly, without etcd, and fail under `MNEMO_REQUIRE_TOOLS=1`).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mnemo_repl::Membership;
use mnemo_repl_etcd::testing::EtcdServer;
use mnemo_repl_etcd::{
    await_takeover, try_take_over, ClusterConfig, Control, PrimaryMembership, PrimaryRole, Verdict,
};

const TIMEOUT: Duration = Duration::from_secs(2);

fn control(etcd: &EtcdServer, cluster: &str) -> Arc<Control> {
    Arc::new(Control::connect(std::slice::from_ref(&etcd.url), cluster, TIMEOUT).expect("etcd"))
}

fn role(me: &str, mirror: &str) -> PrimaryRole {
    PrimaryRole {
        me: me.into(),
        mirror: Some(mirror.into()),
        mode: "sync".into(),
        ttl_s: 1,
    }
}

#[test]
fn compare_and_swap_lets_exactly_one_of_two_candidates_win() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let first = ClusterConfig {
        epoch: 1,
        primary: "127.0.0.1:1".into(),
        mirror: Some("127.0.0.1:2".into()),
        mirror_in_sync: true,
        backups: vec![],
        mode: "sync".into(),
    };
    let setup = control(&etcd, "race");
    assert!(setup.create(&first).unwrap());
    assert!(!setup.create(&first).unwrap(), "created twice");
    let candidates = [control(&etcd, "race"), control(&etcd, "race")];
    for round in 0..20u64 {
        // Both read the same revision, then both swap at once.
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = candidates
            .iter()
            .enumerate()
            .map(|(who, c)| {
                let (c, barrier) = (Arc::clone(c), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let (config, revision) = c.load().unwrap().unwrap();
                    let next = ClusterConfig {
                        epoch: config.epoch + 1,
                        primary: format!("candidate-{who}"),
                        ..config
                    };
                    barrier.wait();
                    (c.swap(revision, &next).unwrap(), next)
                })
            })
            .collect();
        let results: Vec<(bool, ClusterConfig)> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        let winners: Vec<&ClusterConfig> = results.iter().filter(|r| r.0).map(|r| &r.1).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let (now, _) = setup.load().unwrap().unwrap();
        assert_eq!(&now, winners[0], "round {round}");
        assert_eq!(now.epoch, round + 2);
    }
}

#[test]
fn two_mirrors_racing_to_take_over_promote_exactly_one() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    for round in 0..5 {
        let cluster = format!("takeover-race-{round}");
        let setup = control(&etcd, &cluster);
        let config = ClusterConfig {
            epoch: 7,
            primary: "127.0.0.1:1".into(),
            mirror: Some("127.0.0.1:2".into()),
            mirror_in_sync: true,
            backups: vec![],
            mode: "sync".into(),
        };
        assert!(setup.create(&config).unwrap());
        // No primary holds the liveness key: both candidates find it gone.
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|who| {
                let c = control(&etcd, &cluster);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    try_take_over(&c, "127.0.0.1:2", &format!("new-{who}"), &|| true).unwrap()
                })
            })
            .collect();
        let verdicts: Vec<Verdict> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let promoted: Vec<&ClusterConfig> = verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Promoted(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(promoted.len(), 1, "{verdicts:?}");
        let (now, _) = setup.load().unwrap().unwrap();
        assert_eq!(&now, promoted[0]);
        assert_eq!((now.epoch, now.mirror.as_deref()), (8, None));
    }
}

#[test]
fn the_mirror_takes_over_only_when_the_lease_expires_and_it_was_in_sync() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let (p, m, m_primary) = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003");
    let mirror = control(&etcd, "failover");

    // A primary whose mirror is in sync, alive: nothing happens.
    let primary = PrimaryMembership::start(control(&etcd, "failover"), &role(p, m)).unwrap();
    assert_eq!(primary.epoch(), 1);
    assert!(matches!(
        try_take_over(&mirror, m, m_primary, &|| true).unwrap(),
        Verdict::Refused(_) | Verdict::Wait(_)
    ));
    primary.mirror_in_sync();
    let (config, _) = mirror.load().unwrap().unwrap();
    assert!(config.mirror_in_sync, "{config:?}");
    match try_take_over(&mirror, m, m_primary, &|| true).unwrap() {
        Verdict::Wait(why) => assert!(why.contains("alive"), "{why}"),
        other => panic!("took over from a live primary: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        matches!(
            try_take_over(&mirror, m, m_primary, &|| true).unwrap(),
            Verdict::Wait(_)
        ),
        "the lease was not kept alive"
    );
    assert_eq!(primary.deposed(), None);

    // The primary dies (its client and lease keeper with it): the mirror takes over.
    drop(primary);
    let gone = Instant::now();
    let config = await_takeover(&mirror, m, m_primary, &|| true).unwrap();
    let waited = gone.elapsed();
    println!("takeover {waited:?} after the primary's last keep-alive stopped (TTL 1 s)");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    assert_eq!(config.epoch, 2);
    assert_eq!(config.primary, m_primary);
    assert_eq!(config.mirror, None);

    // The old primary, restarted, is refused: another node is the primary now.
    let err = PrimaryMembership::start(control(&etcd, "failover"), &role(p, m)).unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    // The new primary starts (alone: mode local) at the epoch it took over at.
    let alone = PrimaryRole {
        me: m_primary.into(),
        mirror: None,
        mode: "local".into(),
        ttl_s: 1,
    };
    let new = PrimaryMembership::start(control(&etcd, "failover"), &alone).unwrap();
    assert_eq!(new.epoch(), 2);
    drop(new);
    // A mirror joining it is a new configuration: a new epoch, out of sync until its copy.
    let joined = PrimaryRole {
        mirror: Some("127.0.0.1:7004".into()),
        mode: "sync".into(),
        ..alone
    };
    let new = PrimaryMembership::start(control(&etcd, "failover"), &joined).unwrap();
    assert_eq!(new.epoch(), 3);
    let (config, _) = mirror.load().unwrap().unwrap();
    assert_eq!(
        (config.mirror.as_deref(), config.mirror_in_sync),
        (Some("127.0.0.1:7004"), false)
    );
}

#[test]
fn a_mirror_recorded_out_of_sync_is_never_promoted() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let (p, m) = ("127.0.0.1:7101", "127.0.0.1:7102");
    let mirror = control(&etcd, "lost");
    let primary = PrimaryMembership::start(control(&etcd, "lost"), &role(p, m)).unwrap();
    primary.mirror_in_sync();
    primary.mirror_lost().unwrap();
    assert!(!mirror.load().unwrap().unwrap().0.mirror_in_sync);
    drop(primary);
    std::thread::sleep(Duration::from_millis(2500));
    match try_take_over(&mirror, m, "127.0.0.1:7103", &|| true).unwrap() {
        Verdict::Refused(why) => assert!(why.contains("not in sync"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A mirror without a complete image is not promoted either.
    let restarted = PrimaryMembership::start(control(&etcd, "lost"), &role(p, m)).unwrap();
    restarted.mirror_in_sync();
    drop(restarted);
    std::thread::sleep(Duration::from_millis(2500));
    match try_take_over(&mirror, m, "127.0.0.1:7103", &|| false).unwrap() {
        Verdict::Refused(why) => assert!(why.contains("complete image"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(mirror.load().unwrap().unwrap().0.epoch, 1);
}

#[test]
fn a_primary_whose_configuration_changed_is_deposed() {
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let (p, m) = ("127.0.0.1:7201", "127.0.0.1:7202");
    let admin = control(&etcd, "deposed");
    let primary = PrimaryMembership::start(control(&etcd, "deposed"), &role(p, m)).unwrap();
    primary.mirror_in_sync();
    assert_eq!(primary.may_acknowledge(), Ok(()));
    // Another node takes the role (as a promoted mirror does).
    let (config, revision) = admin.load().unwrap().unwrap();
    let next = ClusterConfig {
        epoch: config.epoch + 1,
        primary: "127.0.0.1:7203".into(),
        ..config
    };
    assert!(admin.swap(revision, &next).unwrap());
    // Recording the mirror's loss fails, and from then on nothing is acknowledged.
    let err = primary.mirror_lost().unwrap_err();
    assert!(err.contains("deposed"), "{err}");
    assert!(primary.may_acknowledge().is_err());
    assert!(primary.deposed().is_some());
}
