//! Helpers of the `dlm serve` tests: a known fill of queues and locks, a
//! started `dlm serve`, a tiny HTTP/1.1 client, and a minimal WebDriver
//! client for chromedriver (headless Chromium). No extra dependency.
#![allow(dead_code, missing_docs)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{DLM, RedisServer, TempDir, tempdir};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The payload that must be shown, never run.
pub const XSS: &str = "<script>alert(1)</script>";

/// A free loopback port (bound then released).
pub fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Fill queue `jobs`: 3 waiting (`a`, `b`, `xss` with [`XSS`] as payload),
/// 1 delayed (`later`), 1 in flight (`flying`), 2 dead (`d1`, `d2`); queue
/// `mail`: 1 waiting; locks `orders:1` and `orders:2` held for 5 minutes.
pub fn fill(server: &RedisServer) -> Result<(), Error> {
    use dlm::queue::{NewTask, OnDuplicate};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let c = dlm::Client::connect(&server.url()).await?;
        let q = c.queue("jobs").max_attempts(1);
        // Claimed first (earliest due): one stays in flight, two die.
        q.enqueue(["flying", "d1", "d2"], Duration::ZERO, OnDuplicate::Keep)
            .await?;
        for lease in q.claim(3, Duration::from_secs(600)).await? {
            if lease.task().id == "flying" {
                std::mem::forget(lease);
            } else {
                lease.nack("boom: <b>bad</b> input").await?;
            }
        }
        q.enqueue(
            [
                NewTask::new("a").payload("{\"n\":1}"),
                NewTask::new("b"),
                NewTask::new("xss").payload(XSS),
            ],
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
        q.enqueue(["later"], Duration::from_secs(3600), OnDuplicate::Keep)
            .await?;
        c.queue("mail").push("m1").await?;
        let opts = dlm::LockOptions::new(Duration::from_secs(300));
        for name in ["orders:1", "orders:2"] {
            std::mem::forget(c.lock(name).acquire(&opts).await?);
        }
        Ok::<_, Error>(())
    })
}

/// A running `dlm serve`, killed (by its pid) when dropped.
pub struct Serve {
    pub child: Child,
    pub port: u16,
    dir: TempDir,
}

impl Serve {
    /// Start `dlm --redis URL serve --listen ADDR:PORT EXTRA...` and wait for its URL line.
    pub fn start(server: &RedisServer, host: &str, extra: &[&str]) -> Result<Serve, Error> {
        let port = free_port()?;
        let dir = tempdir()?;
        let listen = format!("{host}:{port}");
        let mut cmd = Command::new(DLM);
        cmd.env_remove("DLM_REDIS_URL")
            .env_remove("DLM_ADMIN_TOKEN")
            .env_remove("DLM_LOG")
            .args([
                "--redis",
                &server.url(),
                "serve",
                "--listen",
                &listen,
                "--interval",
                "1s",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout"))?)
            .stderr(std::fs::File::create(dir.path().join("stderr"))?);
        let child = cmd.spawn()?;
        let serve = Serve { child, port, dir };
        let start = Instant::now();
        while !serve.stdout().contains("dlm serve: http://") {
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("dlm serve did not start: {}", serve.stderr()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(serve)
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn get(&self, path: &str) -> Result<Reply, Error> {
        http(self.port, "GET", path, &[], "")
    }

    pub fn get_json(&self, path: &str) -> Result<serde_json::Value, Error> {
        let r = self.get(path)?;
        if r.status != 200 {
            return Err(format!("GET {path}: {} {}", r.status, r.body).into());
        }
        Ok(serde_json::from_str(&r.body)?)
    }

    /// POST a form.
    pub fn post(&self, path: &str, form: &str, headers: &[(&str, &str)]) -> Result<Reply, Error> {
        let mut all = vec![("content-type", "application/x-www-form-urlencoded")];
        all.extend_from_slice(headers);
        http(self.port, "POST", path, &all, form)
    }

    /// How many dead tasks `queue` has, from the API.
    pub fn dead_total(&self, queue: &str) -> Result<u64, Error> {
        let v = self.get_json(&format!("/api/queues/{queue}?state=dead"))?;
        v["total"]
            .as_u64()
            .ok_or_else(|| format!("no total in {v}").into())
    }

    /// The CSRF token the pages embed.
    pub fn csrf(&self) -> Result<String, Error> {
        let page = self.get("/queues/jobs/dead")?.body;
        let (_, rest) = page
            .split_once("name=\"csrf\" value=\"")
            .ok_or("no csrf field")?;
        Ok(rest.split('"').next().unwrap_or_default().to_string())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP reply.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// One HTTP/1.1 request (`Connection: close`), read to the end.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Reply, Error> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    // Read the head, then as many bytes as Content-Length says (some servers
    // keep the connection open), else to the end.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err("connection closed before the end of headers".into());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let status = head.split(' ').nth(1).ok_or("no status")?.parse()?;
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let mut body_bytes = raw[head_end + 4..].to_vec();
    match length {
        Some(n) => {
            while body_bytes.len() < n {
                let got = s.read(&mut buf)?;
                if got == 0 {
                    break;
                }
                body_bytes.extend_from_slice(&buf[..got]);
            }
        }
        None => {
            s.read_to_end(&mut body_bytes)?;
        }
    }
    let mut body = String::from_utf8_lossy(&body_bytes).into_owned();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body)?;
    }
    Ok(Reply { status, head, body })
}

fn unchunk(mut body: &str) -> Result<String, Error> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or("bad chunk")?;
        let n = usize::from_str_radix(size.trim(), 16)?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..n).ok_or("short chunk")?);
        body = rest.get(n + 2..).ok_or("short chunk")?;
    }
}

/// Chromium and chromedriver, when installed.
pub fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    let driver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    Some((chromium, driver))
}

/// A chromedriver and one headless Chromium session, both ended when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: TempDir,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub fn start(chromium: &Path, driver: &Path) -> Result<Browser, Error> {
        let port = free_port()?;
        let profile = tempdir()?;
        let driver = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let start = Instant::now();
        while http(port, "GET", "/status", &[], "").is_err() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("chromedriver did not start".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = serde_json::json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                         "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                         "--window-size=1280,900",
                         format!("--user-data-dir={}", browser._profile.path().display())]
            }
        }}});
        let v = browser.call("POST", "/session", Some(caps))?;
        browser.session = v["sessionId"].as_str().ok_or("no session id")?.to_string();
        Ok(browser)
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, Error> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let r = http(
            self.port,
            method,
            path,
            &[("content-type", "application/json")],
            &body,
        )?;
        let v: serde_json::Value = serde_json::from_str(&r.body)?;
        if r.status != 200 {
            return Err(format!("webdriver {method} {path}: {} {}", r.status, r.body).into());
        }
        Ok(v["value"].clone())
    }

    fn session_call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, Error> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    pub fn goto(&self, url: &str) -> Result<(), Error> {
        self.session_call("POST", "/url", Some(serde_json::json!({ "url": url })))?;
        Ok(())
    }

    /// Run `script` (a function body; `return` gives the value) in the page.
    pub fn eval(&self, script: &str) -> Result<serde_json::Value, Error> {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(serde_json::json!({ "script": script, "args": [] })),
        )
    }

    /// Evaluate `script` until `ok` accepts its value (a click's navigation
    /// may still be on its way), at most 10 s; returns the last value.
    pub fn eval_until(
        &self,
        script: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, Error> {
        let start = Instant::now();
        loop {
            let v = self.eval(script)?;
            if ok(&v) || start.elapsed() > Duration::from_secs(10) {
                return Ok(v);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn find(&self, css: &str) -> Result<String, Error> {
        let v = self.session_call(
            "POST",
            "/element",
            Some(serde_json::json!({"using": "css selector", "value": css})),
        )?;
        Ok(v[ELEMENT].as_str().ok_or("no element id")?.to_string())
    }

    /// Click the element `css` selects (found again if the live refresh replaced it).
    pub fn click(&self, css: &str) -> Result<(), Error> {
        let mut last = None;
        for _ in 0..3 {
            let id = self.find(css)?;
            match self.session_call(
                "POST",
                &format!("/element/{id}/click"),
                Some(serde_json::json!({})),
            ) {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| "click failed".into()))
    }

    /// Whether an alert() is open (the XSS check).
    pub fn alert_open(&self) -> bool {
        self.session_call("GET", "/alert/text", None).is_ok()
    }

    /// Resize the window (for a screenshot of a whole page).
    pub fn resize(&self, width: u32, height: u32) -> Result<(), Error> {
        self.session_call(
            "POST",
            "/window/rect",
            Some(serde_json::json!({ "width": width, "height": height })),
        )?;
        Ok(())
    }

    pub fn screenshot(&self, path: &Path) -> Result<(), Error> {
        let v = self.session_call("GET", "/screenshot", None)?;
        std::fs::write(path, base64(v.as_str().ok_or("no screenshot")?)?)?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.session_call("DELETE", "", None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64(text: &str) -> Result<Vec<u8>, Error> {
    let value = |c: u8| -> Result<u32, Error> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("bad base64 byte {c}").into()),
        }
        .into())
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let full = n.to_be_bytes();
        out.extend_from_slice(&full[1..chunk.len()]);
    }
    Ok(out)
}
