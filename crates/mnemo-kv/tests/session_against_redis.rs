//! Differential test of the commands a session answers by itself: the same bytes go to a real
//! redis-server 7.0 (Debian's `redis-server`, started here on a free loopback port) and to a
//! `Session`, each followed by QUIT, and everything up to the close must be identical.
//!
//! When `redis-server` is not installed the test says so and checks nothing (it fails
//! instead under `MNEMO_REQUIRE_TOOLS=1`, as `scripts/test.sh` sets).

use std::io::{Read, Write};

use mnemo_kv::server::{Session, SessionConfig};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Reply, ReplyDecoder};
use mnemo_testkit::redis::RedisServer;

/// The throwaway redis-server, with this test's transcript helper.
struct Redis(RedisServer);

impl Redis {
    /// Everything Redis sends for `input` followed by QUIT, until it closes.
    fn transcript(&self, input: &[u8]) -> Vec<u8> {
        let mut stream = self.0.connect();
        stream.write_all(input).expect("write");
        stream.write_all(b"QUIT\r\n").expect("write");
        let mut output = Vec::new();
        let _ = stream.read_to_end(&mut output);
        output
    }
}

/// Everything a session sends for `input` followed by QUIT. Every command must be local.
fn our_transcript(password: Option<&str>, input: &[u8]) -> Vec<u8> {
    let config = SessionConfig {
        password: password.map(|p| Bytes::copy_from_slice(p.as_bytes())),
        ..SessionConfig::default()
    };
    let mut session = Session::new(1, config);
    session.receive(input);
    session.receive(b"QUIT\r\n");
    if let Some(request) = session.poll_request() {
        panic!("{} went to the executor", request.spec.name);
    }
    let output = session.take_output().to_vec();
    assert!(session.should_close(), "session still open after QUIT");
    output
}

fn compare(redis: &Redis, password: Option<&str>, cases: &[&[u8]]) {
    for case in cases {
        let theirs = redis.transcript(case);
        let ours = our_transcript(password, case);
        assert_eq!(
            ours.escape_ascii().to_string(),
            theirs.escape_ascii().to_string(),
            "input {}",
            case.escape_ascii()
        );
    }
}

/// The HELLO map with the fields that must differ (server version, client id) blanked.
fn hello_shape(bytes: &[u8]) -> Vec<Reply> {
    let mut decoder = ReplyDecoder::new();
    decoder.feed(bytes);
    let mut replies = Vec::new();
    while let Ok(Some(reply)) = decoder.next_reply() {
        let reply = match reply {
            Reply::Map(pairs) => Reply::Map(
                pairs
                    .into_iter()
                    .map(|(key, value)| match &key {
                        Reply::Bulk(name) if &name[..] == b"version" || &name[..] == b"id" => {
                            (key, Reply::Null)
                        }
                        _ => (key, value),
                    })
                    .collect(),
            ),
            Reply::Array(items) => {
                let mut blank_next = false;
                let items = items.into_iter().map(|item| {
                    let blank = std::mem::replace(
                        &mut blank_next,
                        matches!(&item, Reply::Bulk(name) if &name[..] == b"version" || &name[..] == b"id"),
                    );
                    if blank { Reply::Null } else { item }
                });
                Reply::Array(items.collect())
            }
            other => other,
        };
        replies.push(reply);
    }
    replies
}

#[test]
fn local_commands_answer_like_redis() {
    let Some(open) = RedisServer::start_or_skip(&[], "differential tests").map(Redis) else {
        return;
    };
    compare(
        &open,
        None,
        &[
            b"PING\r\n",
            b"PING a\r\n",
            b"PING a b\r\n",
            b"ECHO\r\n",
            b"ECHO x\r\n",
            b"HELLO 4\r\n",
            b"HELLO x\r\n",
            b"HELLO 3 FOO\r\n",
            b"HELLO 2 SETNAME \"a b\"\r\n",
            b"AUTH x\r\n",
            b"AUTH a b c\r\n",
            b"AUTH default x\r\n",
            b"AUTH someone x\r\n",
            b"SELECT x\r\n",
            b"SELECT 0\r\n",
            b"SELECT 99\r\n",
            b"SELECT -1\r\n",
            b"SELECT 99999999999\r\n",
            b"CLIENT SETNAME \"a b\"\r\n",
            b"CLIENT SETNAME app\r\nCLIENT GETNAME\r\n",
            b"CLIENT GETNAME\r\n",
            b"CLIENT SETNAME app\r\nCLIENT SETNAME \"\"\r\nCLIENT GETNAME\r\n",
            b"CLIENT nosuch\r\n",
            b"CLIENT\r\n",
            b"COMMAND nosuch\r\n",
            b"NOSUCH a b\r\n",
            b"*1\r\n$4\r\nPING\r\n*x\r\n",
        ],
    );
    let hello = b"HELLO 3\r\nCLIENT GETNAME\r\nHELLO 2 SETNAME me\r\nCLIENT GETNAME\r\n";
    assert_eq!(
        hello_shape(&our_transcript(None, hello)),
        hello_shape(&open.transcript(hello))
    );

    let locked =
        Redis(RedisServer::start(&["--requirepass", "pw"]).expect("a second redis-server"));
    compare(
        &locked,
        Some("pw"),
        &[
            b"GET k\r\n",
            b"PING\r\n",
            b"GET\r\n",
            b"NOSUCH\r\n",
            b"HELLO 3\r\n",
            b"AUTH wrong\r\n",
            b"AUTH default wrong\r\n",
            b"AUTH pw\r\nPING\r\n",
            b"AUTH default pw\r\nPING\r\n",
            b"HELLO 3 AUTH default wrong\r\n",
            b"CLIENT SETNAME x\r\n",
            b"*11\r\n",
            b"*10\r\n$4\r\nPING\r\n",
            b"*1\r\n$16385\r\n",
        ],
    );
    let hello = b"HELLO 3 AUTH default pw SETNAME me\r\nCLIENT GETNAME\r\n";
    assert_eq!(
        hello_shape(&our_transcript(Some("pw"), hello)),
        hello_shape(&locked.transcript(hello))
    );
}
