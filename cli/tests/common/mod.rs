//! The `wharf run` process the standalone tests start: the real binary on free loopback
//! ports, its log collected.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wharf_dataplane::testing::{eventually, free_port, http_get};

/// A running `wharf run` whose log is collected.
pub struct Wharf {
    child: Child,
    log: Arc<Mutex<String>>,
    pub http: u16,
    pub https: u16,
    pub passthrough: u16,
    /// The `--tcp-service` listener (forwarding to quickstart/api:80).
    pub tcp: u16,
    pub admin: u16,
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl Wharf {
    pub fn start(files: &[&Path], extra: &[&str]) -> Wharf {
        Self::start_with_workers(files, extra, None)
    }

    /// `workers: Some(1)` runs the single-threaded scheduler the binary picks for one worker.
    pub fn start_with_workers(files: &[&Path], extra: &[&str], workers: Option<usize>) -> Wharf {
        let (http, https, passthrough, tcp, admin) = (free_port(), free_port(), free_port(), free_port(), free_port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wharf"));
        cmd.arg("run").args(["--listen-address", "127.0.0.1"]);
        for f in files {
            cmd.arg("-f").arg(f);
        }
        cmd.args(["--http-port", &http.to_string(), "--https-port", &https.to_string()])
            .args(["--passthrough-port", &passthrough.to_string(), "--admin-port", &admin.to_string()])
            .args(["--tcp-service", &format!("{tcp}=quickstart/api:80")])
            .args(["--watch-interval", "50ms", "--drain-timeout", "5s"])
            .args(extra)
            .env("RUST_LOG", "info")
            .env_remove("TOKIO_WORKER_THREADS")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(n) = workers {
            cmd.env("TOKIO_WORKER_THREADS", n.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Wharf { child, log, http, https, passthrough, tcp, admin }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for the process to exit (off the runtime's threads); asserts it exited 0 and
    /// returns its log.
    pub async fn exits_zero(mut self) -> String {
        let (status, w) = tokio::task::spawn_blocking(move || (self.child.wait().unwrap(), self)).await.unwrap();
        assert!(status.success(), "exit status {status:?}; log:\n{}", w.log());
        w.log()
    }

    /// Waits for readiness; the deadline only bounds a failure (a loaded CI machine can
    /// take seconds to start a debug build).
    pub async fn wait_ready(&self) {
        assert!(self.ready().await, "not ready; log:\n{}", self.log());
    }

    /// Whether it became ready within 30 s.
    pub async fn ready(&self) -> bool {
        let admin = addr(self.admin);
        eventually(Duration::from_secs(30), || async move {
            http_get(admin, "x", "/healthz/ready").await.map(|s| s.status) == Ok(200)
        })
        .await
    }

    /// The log as it grows (for waiting on a line).
    pub fn log_handle(&self) -> Arc<Mutex<String>> {
        Arc::clone(&self.log)
    }

    /// The process id (to signal it).
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Wharf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
