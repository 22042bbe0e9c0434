//! CLIENT LIST / INFO / KILL / PAUSE / UNPAUSE against a real redis-server 7.0
//! (`common/mod.rs`): the same errors, the same fields in the same order with the values
//! both servers know alike, and, on mnemo, that CLIENT KILL really closes the connection
//! and CLIENT PAUSE really holds the commands it covers.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Conn, Pair};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::Reply;

fn args(line: &[&str]) -> Vec<Bytes> {
    line.iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

/// A connection and its own address (what the server shows as addr=).
fn connect(port: u16) -> (Conn, String) {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let addr = stream.local_addr().expect("local address").to_string();
    (Conn::new(stream), addr)
}

fn text(reply: &Reply) -> String {
    match reply {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("not a text reply: {other:?}"),
    }
}

/// `field=value` pairs of a CLIENT LIST line, in order.
fn fields(line: &str) -> Vec<(String, String)> {
    line.trim_end()
        .split(' ')
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn value(fields: &[(String, String)], name: &str) -> String {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name}= in {fields:?}"))
}

#[test]
fn client_errors_like_redis() {
    let Some(pair) = Pair::start("client differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "CLIENT LIST TYPE bogus",
        "CLIENT LIST bogus",
        "CLIENT LIST ID x",
        "CLIENT LIST ID 0",
        "CLIENT LIST ID 999999",
        "CLIENT LIST TYPE pubsub",
        "CLIENT LIST TYPE master",
        "CLIENT KILL 1.2.3.4:5",
        "CLIENT KILL addr",
        "CLIENT KILL ID 999999",
        "CLIENT KILL ID x",
        "CLIENT KILL ID 0",
        "CLIENT KILL ID -5",
        "CLIENT KILL ADDR 1.2.3.4:5",
        "CLIENT KILL LADDR 1.2.3.4:5",
        "CLIENT KILL USER nobody",
        "CLIENT KILL USER default SKIPME yes",
        "CLIENT KILL TYPE bogus",
        "CLIENT KILL TYPE normal SKIPME yes",
        "CLIENT KILL SKIPME maybe",
        "CLIENT KILL bogus x",
        "CLIENT KILL MAXAGE 1",
        "CLIENT KILL ID 1 SKIPME",
        "CLIENT KILL",
        "CLIENT PAUSE",
        "CLIENT PAUSE x",
        "CLIENT PAUSE -1",
        "CLIENT PAUSE 10 bogus",
        "CLIENT PAUSE 10 write x",
        "CLIENT PAUSE 0",
        "CLIENT PAUSE 0 WRITE",
        "CLIENT UNPAUSE",
        "CLIENT UNPAUSE x",
        "CLIENT SETNAME app",
        "CLIENT GETNAME",
    ]);
    c.assert_same();
}

/// CLIENT INFO and CLIENT LIST: the same fields in the same order as Redis 7.0, and the
/// values both servers know alike (id, addresses, name, database, flags, command, protocol).
#[test]
fn client_list_and_info_format_like_redis() {
    let Some(pair) = Pair::start("client differential test") else {
        return;
    };
    for (name, port) in [("redis", pair.redis.port()), ("mnemo", pair.mnemo_port())] {
        let (mut a, a_addr) = connect(port);
        let (mut b, b_addr) = connect(port);
        let Reply::Integer(a_id) = a.call(&args(&["CLIENT", "ID"])) else {
            panic!("{name}: CLIENT ID");
        };
        let Reply::Integer(b_id) = b.call(&args(&["CLIENT", "ID"])) else {
            panic!("{name}: CLIENT ID");
        };
        assert_eq!(a.call(&args(&["CLIENT", "SETNAME", "first"])), Reply::ok());
        assert_eq!(a.call(&args(&["SELECT", "3"])), Reply::ok());
        let info = fields(&text(&a.call(&args(&["CLIENT", "INFO"]))));
        let keys: Vec<&str> = info.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "id",
                "addr",
                "laddr",
                "fd",
                "name",
                "age",
                "idle",
                "flags",
                "db",
                "sub",
                "psub",
                "ssub",
                "multi",
                "qbuf",
                "qbuf-free",
                "argv-mem",
                "multi-mem",
                "rbs",
                "rbp",
                "obl",
                "oll",
                "omem",
                "tot-mem",
                "events",
                "cmd",
                "user",
                "redir",
                "resp"
            ],
            "{name}"
        );
        let expect = [
            ("id", a_id.to_string()),
            ("addr", a_addr.clone()),
            ("laddr", format!("127.0.0.1:{port}")),
            ("name", "first".to_string()),
            ("flags", "N".to_string()),
            ("db", "3".to_string()),
            ("sub", "0".to_string()),
            ("multi", "-1".to_string()),
            ("cmd", "client|info".to_string()),
            ("user", "default".to_string()),
            ("resp", "2".to_string()),
        ];
        for (field, expected) in &expect {
            assert_eq!(&value(&info, field), expected, "{name}: {field}");
        }
        // Whole seconds since the connection: 0, or 1 when the test crossed a second's edge
        // (real Redis showed age=1 once under load).
        let age: u64 = value(&info, "age").parse().expect("age is a number");
        assert!(age <= 1, "{name}: age {age}");
        // B subscribes: CLIENT LIST shows both, in id order, B with one subscription.
        b.send(&args(&["SUBSCRIBE", "news"]));
        let _ = b.reply();
        let list = text(&a.call(&args(&["CLIENT", "LIST"])));
        let lines: Vec<Vec<(String, String)>> = list.lines().map(fields).collect();
        let ids: Vec<String> = lines.iter().map(|l| value(l, "id")).collect();
        assert!(
            ids.windows(2)
                .all(|w| w[0].parse::<i64>().ok() < w[1].parse::<i64>().ok()),
            "{name}: {ids:?}"
        );
        let b_line = lines
            .iter()
            .find(|l| value(l, "id") == b_id.to_string())
            .unwrap_or_else(|| panic!("{name}: B not listed in {list}"));
        assert_eq!(value(b_line, "addr"), b_addr, "{name}");
        assert_eq!(value(b_line, "sub"), "1", "{name}");
        assert_eq!(value(b_line, "flags"), "P", "{name}");
        assert_eq!(value(b_line, "cmd"), "subscribe", "{name}");
        let a_line = lines
            .iter()
            .find(|l| value(l, "id") == a_id.to_string())
            .unwrap_or_else(|| panic!("{name}: A not listed"));
        assert_eq!(value(a_line, "cmd"), "client|list", "{name}");
        // TYPE and ID filters.
        let pubsub = text(&a.call(&args(&["CLIENT", "LIST", "TYPE", "pubsub"])));
        assert_eq!(pubsub.lines().count(), 1, "{name}: {pubsub}");
        assert!(pubsub.starts_with(&format!("id={b_id} ")), "{name}");
        let one = text(&a.call(&args(&["CLIENT", "LIST", "ID", &a_id.to_string()])));
        assert_eq!(one.lines().count(), 1, "{name}");
        assert!(one.starts_with(&format!("id={a_id} ")), "{name}");
        // In MULTI: flags=x, multi counts the queued commands.
        let (mut m, _) = connect(port);
        m.call(&args(&["MULTI"]));
        m.call(&args(&["SET", "k", "v"]));
        let Reply::Integer(m_id) = a.call(&args(&["CLIENT", "ID"])) else {
            panic!()
        };
        let _ = m_id;
        let list = text(&a.call(&args(&["CLIENT", "LIST"])));
        let in_multi = list
            .lines()
            .map(fields)
            .find(|l| value(l, "multi") != "-1")
            .unwrap_or_else(|| panic!("{name}: no connection in MULTI in {list}"));
        assert_eq!(value(&in_multi, "flags"), "x", "{name}");
        assert_eq!(value(&in_multi, "multi"), "1", "{name}");
    }
}

/// Whether the server closed `stream` within a few seconds (a read returns end of file or
/// a reset).
fn closed_by_server(conn: &mut Conn) -> bool {
    conn.has_reply_within(Duration::from_millis(10));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let mut byte = [0u8; 64];
        match conn.stream_mut().read(&mut byte) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// CLIENT KILL closes the connections it names, by ID, ADDR, the old ip:port form, TYPE,
/// USER; SKIPME no closes the caller too, after its reply. The same counts as Redis.
#[test]
fn client_kill_closes_the_connection() {
    let Some(pair) = Pair::start("client differential test") else {
        return;
    };
    for (name, port) in [("redis", pair.redis.port()), ("mnemo", pair.mnemo_port())] {
        let (mut killer, _) = connect(port);
        // By ID.
        let (mut victim, _) = connect(port);
        let Reply::Integer(id) = victim.call(&args(&["CLIENT", "ID"])) else {
            panic!("{name}")
        };
        assert_eq!(
            killer.call(&args(&["CLIENT", "KILL", "ID", &id.to_string()])),
            Reply::Integer(1),
            "{name}"
        );
        assert!(
            closed_by_server(&mut victim),
            "{name}: killed by ID, still open"
        );
        // By ADDR, and by the old form.
        let (mut victim, addr) = connect(port);
        victim.call(&args(&["PING"]));
        assert_eq!(
            killer.call(&args(&["CLIENT", "KILL", "ADDR", &addr])),
            Reply::Integer(1),
            "{name}"
        );
        assert!(
            closed_by_server(&mut victim),
            "{name}: killed by ADDR, still open"
        );
        let (mut victim, addr) = connect(port);
        victim.call(&args(&["PING"]));
        assert_eq!(
            killer.call(&args(&["CLIENT", "KILL", &addr])),
            Reply::ok(),
            "{name}"
        );
        assert!(
            closed_by_server(&mut victim),
            "{name}: killed by address, still open"
        );
        // By TYPE pubsub: only the subscriber.
        let (mut subscriber, _) = connect(port);
        subscriber.send(&args(&["SUBSCRIBE", "c"]));
        let _ = subscriber.reply();
        let (mut bystander, _) = connect(port);
        bystander.call(&args(&["PING"]));
        assert_eq!(
            killer.call(&args(&["CLIENT", "KILL", "TYPE", "pubsub"])),
            Reply::Integer(1),
            "{name}"
        );
        assert!(
            closed_by_server(&mut subscriber),
            "{name}: subscriber still open"
        );
        assert_eq!(
            bystander.call(&args(&["PING"])),
            Reply::Simple(Bytes::from_static(b"PONG")),
            "{name}"
        );
        // USER default (skipping the caller): everyone else.
        assert_eq!(
            killer.call(&args(&["CLIENT", "KILL", "USER", "default"])),
            Reply::Integer(1),
            "{name}"
        );
        assert!(
            closed_by_server(&mut bystander),
            "{name}: bystander still open"
        );
        // SKIPME no: the caller's own connection closes after the reply.
        let Reply::Integer(own) = killer.call(&args(&["CLIENT", "ID"])) else {
            panic!("{name}")
        };
        assert_eq!(
            killer.call(&args(&[
                "CLIENT",
                "KILL",
                "ID",
                &own.to_string(),
                "SKIPME",
                "no"
            ])),
            Reply::Integer(1),
            "{name}"
        );
        assert!(
            closed_by_server(&mut killer),
            "{name}: the caller still open"
        );
    }
}

/// CLIENT PAUSE holds the commands it covers until it ends (WRITE: writes only; ALL:
/// everything), in order; CLIENT UNPAUSE ends it early.
#[test]
fn client_pause_holds_commands() {
    let Some(pair) = Pair::start("client differential test") else {
        return;
    };
    for (name, port) in [("redis", pair.redis.port()), ("mnemo", pair.mnemo_port())] {
        let (mut admin, _) = connect(port);
        let (mut client, _) = connect(port);
        client.call(&args(&["SET", "k", "0"]));
        assert_eq!(
            admin.call(&args(&["CLIENT", "PAUSE", "400", "WRITE"])),
            Reply::ok(),
            "{name}"
        );
        // Reads go on.
        let started = Instant::now();
        assert_eq!(
            client.call(&args(&["GET", "k"])),
            Reply::Bulk(Bytes::from_static(b"0")),
            "{name}"
        );
        assert!(started.elapsed() < Duration::from_millis(300), "{name}");
        // A write waits for the end of the pause; the read after it waits too (order).
        client.send(&args(&["INCR", "k"]));
        client.send(&args(&["GET", "k"]));
        assert!(
            !client.has_reply_within(Duration::from_millis(150)),
            "{name}: a write ran during CLIENT PAUSE WRITE"
        );
        assert_eq!(client.reply(), Reply::Integer(1), "{name}");
        assert_eq!(
            client.reply(),
            Reply::Bulk(Bytes::from_static(b"1")),
            "{name}"
        );
        assert!(started.elapsed() >= Duration::from_millis(350), "{name}");
        // UNPAUSE releases at once.
        assert_eq!(
            admin.call(&args(&["CLIENT", "PAUSE", "100000", "WRITE"])),
            Reply::ok(),
            "{name}"
        );
        client.send(&args(&["INCR", "k"]));
        assert!(
            !client.has_reply_within(Duration::from_millis(150)),
            "{name}: a write ran during CLIENT PAUSE"
        );
        let unpaused = Instant::now();
        assert_eq!(
            admin.call(&args(&["CLIENT", "UNPAUSE"])),
            Reply::ok(),
            "{name}"
        );
        assert_eq!(client.reply(), Reply::Integer(2), "{name}");
        assert!(unpaused.elapsed() < Duration::from_secs(2), "{name}");
    }
}
