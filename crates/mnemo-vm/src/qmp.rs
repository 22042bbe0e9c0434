//! A QMP client: QEMU's machine protocol, JSON objects one per line over a Unix socket.
//!
//! ```text
//!  QEMU -> {"QMP": {"version": ..., "capabilities": [...]}}      greeting, once
//!  us   -> {"execute": "qmp_capabilities"}                       leave negotiation mode
//!  QEMU -> {"return": {}}
//!  us   -> {"execute": "stop"}
//!  QEMU -> {"event": "STOP", ...}                                events come at any time
//!  QEMU -> {"return": {}}                                        or {"error": {"class", "desc"}}
//! ```
//!
//! Commands are sent one at a time and answered in order, so a reply is the next line that
//! is not an event. Events are kept (the last few) for diagnostics only. Nothing QEMU sends
//! can panic this client: a line that is not a JSON object, or too long, is a
//! [`Error::Protocol`].

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::limits;

/// Events kept for diagnostics.
const EVENTS_KEPT: usize = 32;

/// One QMP connection, past capability negotiation.
#[derive(Debug)]
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    path: PathBuf,
    events: VecDeque<Value>,
}

impl Qmp {
    /// Connects to the QMP socket at `path`, retrying until `timeout` while the socket does
    /// not exist yet or refuses. `alive` is called between attempts; its error (QEMU exited)
    /// ends the wait.
    pub fn connect(
        path: &Path,
        timeout: Duration,
        mut alive: impl FnMut() -> Result<()>,
    ) -> Result<Qmp> {
        let started = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    alive()?;
                    if started.elapsed() > timeout {
                        return Err(Error::Timeout {
                            what: format!("waiting for QMP at {}", path.display()),
                            seconds: timeout.as_secs_f64(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(Error::io("connecting to QMP", path, e)),
            }
        };
        Qmp::handshake(stream, path)
    }

    /// Greeting and capability negotiation on a connected stream.
    pub fn handshake(stream: UnixStream, path: &Path) -> Result<Qmp> {
        stream
            .set_read_timeout(Some(limits::QMP_REPLY_TIMEOUT))
            .map_err(|e| Error::io("setting a timeout on", path, e))?;
        let writer = stream
            .try_clone()
            .map_err(|e| Error::io("cloning the socket of", path, e))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
            path: path.to_path_buf(),
            events: VecDeque::new(),
        };
        let greeting = qmp.read_object()?;
        if !greeting.contains_key("QMP") {
            return Err(Error::Protocol(format!(
                "expected QEMU's greeting, got {}",
                Value::Object(greeting)
            )));
        }
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// Runs `command` with `arguments` and returns its `return` value.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value> {
        let mut request = json!({ "execute": command });
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut line = request.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| Error::io("sending a QMP command to", &self.path, e))?;
        loop {
            let mut reply = self.read_object()?;
            if let Some(value) = reply.remove("return") {
                return Ok(value);
            }
            if let Some(error) = reply.get("error") {
                let field = |name: &str| {
                    error
                        .get(name)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                };
                return Err(Error::Qmp {
                    command: command.to_string(),
                    class: field("class"),
                    desc: field("desc"),
                });
            }
            if reply.contains_key("event") {
                if self.events.len() == EVENTS_KEPT {
                    self.events.pop_front();
                }
                self.events.push_back(Value::Object(reply));
                continue;
            }
            return Err(Error::Protocol(format!(
                "unexpected reply to {command}: {}",
                Value::Object(reply)
            )));
        }
    }

    /// `query-status`: "running", "paused", "inmigrate", "postmigrate", "prelaunch"...
    pub fn status(&mut self) -> Result<String> {
        let reply = self.execute("query-status", None)?;
        reply
            .get("status")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Error::Protocol(format!("query-status without a status: {reply}")))
    }

    /// `migrate-set-capabilities` with `x-ignore-shared` on: shared RAM blocks (the guest's
    /// RAM, `share=on`) stay out of the migration stream. Both ends must set it.
    pub fn ignore_shared(&mut self) -> Result<()> {
        self.execute(
            "migrate-set-capabilities",
            Some(json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": true }] })),
        )
        .map(drop)
    }

    /// The last events QEMU sent (oldest first), for diagnostics.
    pub fn events(&self) -> impl Iterator<Item = &Value> {
        self.events.iter()
    }

    /// Reads one line and parses it as a JSON object.
    fn read_object(&mut self) -> Result<Map<String, Value>> {
        let mut line = Vec::new();
        let read = (&mut self.reader)
            .take(limits::QMP_LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout {
                    what: format!("waiting for a QMP reply on {}", self.path.display()),
                    seconds: limits::QMP_REPLY_TIMEOUT.as_secs_f64(),
                },
                _ => Error::io("reading QMP from", &self.path, e),
            })?;
        if read == 0 {
            return Err(Error::Protocol("QEMU closed the QMP connection".into()));
        }
        if line.len() > limits::QMP_LINE_BYTES_MAX {
            return Err(Error::Protocol(format!(
                "a QMP line longer than {} bytes",
                limits::QMP_LINE_BYTES_MAX
            )));
        }
        parse_line(&line)
    }
}

/// Parses one line from QEMU as a JSON object (sans I/O: fuzzed; never panics).
pub fn parse_line(line: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(Error::Protocol(format!("not a JSON object: {other}"))),
        Err(e) => Err(Error::Protocol(format!(
            "not JSON ({e}): {:?}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake QEMU: greets, then answers each request line with the next scripted lines.
    fn fake(
        script: Vec<Vec<&'static str>>,
    ) -> (
        tempfile::TempDir,
        PathBuf,
        std::thread::JoinHandle<Vec<String>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            writer
                .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
                .unwrap();
            let mut requests = Vec::new();
            for answer in script {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                requests.push(line.trim_end().to_string());
                for reply in answer {
                    writer.write_all(reply.as_bytes()).unwrap();
                    writer.write_all(b"\n").unwrap();
                }
            }
            requests
        });
        (dir, path, handle)
    }

    #[test]
    fn negotiates_skips_events_and_maps_errors() {
        let (_dir, path, server) = fake(vec![
            vec![r#"{"return": {}}"#],
            vec![
                r#"{"event": "STOP", "data": {}, "timestamp": {}}"#,
                r#"{"return": {}}"#,
            ],
            vec![r#"{"return": {"status": "paused", "running": false}}"#],
            vec![r#"{"error": {"class": "GenericError", "desc": "no such thing"}}"#],
        ]);
        let mut qmp = Qmp::connect(&path, Duration::from_secs(5), || Ok(())).unwrap();
        assert_eq!(qmp.execute("stop", None).unwrap(), json!({}));
        assert_eq!(
            qmp.events().count(),
            1,
            "the STOP event was kept, not taken as the reply"
        );
        assert_eq!(qmp.status().unwrap(), "paused");
        match qmp.execute("frobnicate", Some(json!({"x": 1}))) {
            Err(Error::Qmp {
                command,
                class,
                desc,
            }) => {
                assert_eq!(
                    (command.as_str(), class.as_str(), desc.as_str()),
                    ("frobnicate", "GenericError", "no such thing")
                );
            }
            other => panic!("expected a QMP error, got {other:?}"),
        }
        let requests = server.join().unwrap();
        let parsed = |line: &str| serde_json::from_str::<Value>(line).unwrap();
        assert_eq!(parsed(&requests[0]), json!({"execute": "qmp_capabilities"}));
        assert_eq!(
            parsed(&requests[3]),
            json!({"execute": "frobnicate", "arguments": {"x": 1}})
        );
    }

    #[test]
    fn garbage_and_eof_are_errors_not_panics() {
        let (_dir, path, _server) = fake(vec![vec![r#"{"return": {}}"#], vec!["[1, 2"]]);
        let mut qmp = Qmp::connect(&path, Duration::from_secs(5), || Ok(())).unwrap();
        assert!(matches!(qmp.execute("stop", None), Err(Error::Protocol(_))));
        // The fake has no more answers and closes: end of stream (or a broken pipe, if the
        // close came before the request was written).
        assert!(matches!(
            qmp.execute("cont", None),
            Err(Error::Protocol(_) | Error::Io { .. })
        ));
    }

    #[test]
    fn waits_for_the_socket_and_gives_up_when_qemu_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("never.sock");
        let mut calls = 0;
        let result = Qmp::connect(&path, Duration::from_secs(5), || {
            calls += 1;
            if calls == 3 {
                Err(Error::Config("QEMU exited".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(result, Err(Error::Config(_))));
        assert_eq!(calls, 3);
    }
}
