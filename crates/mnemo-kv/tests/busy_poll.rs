//! The event loop's busy poll (`EventLoop::set_busy_poll`) over real loopback sockets: a
//! request that arrives within the window is served without the loop sleeping; one that
//! arrives after it is served too (the loop slept in `epoll_wait` and woke); a stop reaches
//! a polling loop; a zero window never polls.

mod loop_thread;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use loop_thread::{connect, LoopThread};
use mnemo_kv::server::{Effect, Engine, Request};
use mnemo_resp::Encoder;

/// Answers every request it is given `+OK` and writes nothing (the PINGs sent here are
/// answered by the session before an engine sees them).
struct AlwaysOk;

impl Engine for AlwaysOk {
    type Error = std::convert::Infallible;

    fn begin(&mut self) {}

    fn execute(&mut self, _request: &Request, reply: &mut Encoder<'_>) -> Effect {
        reply.simple(b"OK");
        Effect::default()
    }

    fn commit(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn finish_read_only(&mut self) {}
}

fn start(window: Duration) -> LoopThread {
    LoopThread::start(AlwaysOk, |event_loop| event_loop.set_busy_poll(window))
}

/// The loop's busy polls and the hits among them.
fn counts(running: &LoopThread) -> (u64, u64) {
    (
        running.stats.busy_polls.load(Ordering::SeqCst),
        running.stats.busy_poll_hits.load(Ordering::SeqCst),
    )
}

/// Sends a PING and reads its `+PONG` (the session answers it).
fn ping(stream: &mut TcpStream) {
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").expect("send");
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).expect("reply");
    assert_eq!(&reply, b"+PONG\r\n");
}

#[test]
fn a_request_within_the_window_finds_the_loop_polling() {
    let running = start(Duration::from_secs(5));
    let mut stream = connect(running.addr);
    ping(&mut stream);
    // The loop answered and polls now: the next request is caught by the poll.
    thread::sleep(Duration::from_millis(20));
    let (_, hits_before) = counts(&running);
    ping(&mut stream);
    let (polls, hits) = counts(&running);
    assert!(hits > hits_before, "polls {polls}, hits {hits}");
    // A stop (the waker's event) ends a poll: not the 5 s window.
    thread::sleep(Duration::from_millis(20));
    let stopping = Instant::now();
    running.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "the stop took {:?}",
        stopping.elapsed()
    );
}

#[test]
fn a_request_after_the_window_is_served_once_the_loop_wakes() {
    let running = start(Duration::from_micros(200));
    let mut stream = connect(running.addr);
    ping(&mut stream);
    // Far longer than the window: the poll runs out and the loop sleeps in epoll_wait.
    thread::sleep(Duration::from_millis(50));
    let (polls_before, hits_before) = counts(&running);
    ping(&mut stream);
    // Time for the loop to come round to its next wait after answering.
    thread::sleep(Duration::from_millis(20));
    let (polls, hits) = counts(&running);
    // No poll caught it (the loop had slept), and the loop polled again after answering.
    assert_eq!(hits, hits_before, "polls {polls}, hits {hits}");
    assert!(polls > polls_before, "polls {polls}, hits {hits}");
    running.stop();
}

#[test]
fn a_zero_window_never_polls() {
    let running = start(Duration::ZERO);
    let mut stream = connect(running.addr);
    for _ in 0..10 {
        ping(&mut stream);
    }
    assert_eq!(counts(&running), (0, 0));
    running.stop();
}
