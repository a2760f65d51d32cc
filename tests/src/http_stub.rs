//! A loopback HTTP/1.1 server standing in for the network: each request's
//! path goes to a function that says what to answer, and the server counts
//! the connections it accepted, so a test can tell that nothing reached it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One answer: a status line such as `200 OK`, extra headers, a body.
pub struct Reply {
    pub status: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Reply {
    pub fn new(status: &'static str, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

pub struct HttpStub {
    pub port: u16,
    connections: Arc<AtomicUsize>,
}

impl HttpStub {
    /// Serves every request with `answer(path)`, one connection at a time,
    /// until the test ends.
    pub fn start(answer: impl Fn(&str) -> Reply + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|read| read > 2) {
                    header.clear();
                }
                let reply = answer(request_line.split(' ').nth(1).unwrap_or("/"));
                let mut response = format!("HTTP/1.1 {}\r\n", reply.status);
                for (name, value) in &reply.headers {
                    response.push_str(&format!("{name}: {value}\r\n"));
                }
                response.push_str(&format!(
                    "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                    reply.body.len(),
                    reply.body
                ));
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Self { port, connections }
    }

    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    /// The connections accepted so far, once `at_least` have been (or five
    /// seconds passed): the kernel completes a connection before the server
    /// thread gets round to accepting it.
    pub fn connections(&self, at_least: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.connections.load(Ordering::SeqCst) < at_least && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.connections.load(Ordering::SeqCst)
    }
}
