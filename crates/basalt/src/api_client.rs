//! The admin commands' side of the mon's JSON HTTP API (`docs/design/api.md`): a small
//! blocking client, the `--api`/`--json` options they share, and aligned tables for people.
//!
//! The client is synchronous (`ureq`), so these commands need no async runtime. An API error
//! answer (`{"error": "..."}`) becomes the command's one-line error; a mon that cannot be
//! reached is named with the address tried.
//!
//! Every mon serves the whole API (followers read and write the metadata store as the leader
//! does), so `--api` may name several, comma-separated: a request goes to the first, and to the
//! next when one cannot be connected to, or, for a read, does not answer within
//! [`READ_ATTEMPT_TIMEOUT`] or answers that it cannot reach the metadata store (503). A change that was sent and not answered is not sent again (it may
//! have been applied); its error says so.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The API address used when neither `--api` nor `BASALT_API` gives one.
pub const API_ADDRESS_DEFAULT: &str = "127.0.0.1:8080";
/// How long one API request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to one mon may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a read may wait for one mon's answer when there is another to ask: a mon answers
/// a read in milliseconds unless it is hung or cut off.
const READ_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of every command that talks to the API.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// The mon API address, HOST:PORT or http://HOST:PORT, or several mons' comma-separated
    /// [env: BASALT_API] [default: 127.0.0.1:8080].
    #[arg(long = "api", value_name = "ADDR", global = true)]
    pub api: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Where every command finds the mon's API: `--api`, else `BASALT_API`, else [`API_ADDRESS_DEFAULT`].
pub fn api_address(explicit: Option<&str>) -> String {
    choose_api_address(explicit, std::env::var("BASALT_API").ok().as_deref())
}

fn choose_api_address(explicit: Option<&str>, environment: Option<&str>) -> String {
    explicit.or_else(|| environment.filter(|value| !value.trim().is_empty())).unwrap_or(API_ADDRESS_DEFAULT).to_string()
}

impl ApiArgs {
    pub fn address(&self) -> String {
        api_address(self.api.as_deref())
    }

    pub fn client(&self) -> ApiClient {
        ApiClient::new(&self.address())
    }
}

pub struct ApiClient {
    http: ureq::Agent,
    /// `http://host:port/api/v1` of each mon given, in the order given.
    base_urls: Vec<String>,
}

impl ApiClient {
    /// A client of the mon at `address`, or of the mons at a comma-separated list of them.
    pub fn new(address: &str) -> ApiClient {
        let base_urls = address
            .split(',')
            .map(|address| address.trim().trim_end_matches('/'))
            .filter(|address| !address.is_empty())
            .map(|address| {
                let root = if address.starts_with("http://") || address.starts_with("https://") {
                    address.to_string()
                } else {
                    format!("http://{address}")
                };
                format!("{root}/api/v1")
            })
            .collect();
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .build()
            .into();
        ApiClient { http, base_urls }
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.request("GET", path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.request("POST", path, Some(body))
    }

    pub fn patch(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.request("PATCH", path, Some(body))
    }

    pub fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.request("DELETE", path, None)
    }

    /// Sends one request to the first mon that takes it; a 2xx answer's JSON, or the API's
    /// error message as the error.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let Some(last) = self.base_urls.len().checked_sub(1) else {
            bail!("no basalt API address given (set --api or BASALT_API)");
        };
        let body = body.map(|body| body.to_string());
        let mut unreached = Vec::new();
        for (index, base_url) in self.base_urls.iter().enumerate() {
            let another = index < last;
            let url = format!("{base_url}{path}");
            let result = self.attempt(method, &url, body.as_deref(), another);
            let mon = base_url.trim_end_matches("/api/v1");
            match result {
                // A mon that cannot reach the metadata store says so; another may.
                Ok(response) if another && method == "GET" && response.status() == 503 => {
                    let error = answer(method, &url, response).expect_err("a 503 is an error");
                    unreached.push(format!("{mon}: {error}"));
                }
                Ok(response) => return answer(method, &url, response),
                Err(error) if another && (method == "GET" || not_sent(&error)) => {
                    unreached.push(format!("{mon}: {error}"));
                }
                Err(error) if not_sent(&error) => {
                    unreached.push(format!("{mon}: {error}"));
                    bail!(
                        "cannot reach the basalt API at {} (is `basalt mon` running? set --api or BASALT_API)",
                        unreached.join("; ")
                    );
                }
                Err(error) => bail!(
                    "the basalt API at {mon} did not answer {method} {path}: {error}; it may have been applied (check, then try again)"
                ),
            }
        }
        unreachable!("the last mon's attempt returns")
    }

    /// One attempt at one mon; a read that has another mon to go to waits less for its answer.
    fn attempt(
        &self,
        method: &str,
        url: &str,
        body: Option<&str>,
        another: bool,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        match (method, body) {
            ("GET", _) if another => {
                self.http.get(url).config().timeout_global(Some(READ_ATTEMPT_TIMEOUT)).build().call()
            }
            ("GET", _) => self.http.get(url).call(),
            ("DELETE", _) => self.http.delete(url).call(),
            ("POST", Some(body)) => self.http.post(url).content_type("application/json").send(body.as_bytes()),
            ("PATCH", Some(body)) => self.http.patch(url).content_type("application/json").send(body.as_bytes()),
            (method, _) => unreachable!("no {method} request without a body"),
        }
    }
}

/// Whether `error` shows the request never reached the mon (nothing listens, no route, the
/// connect timed out), so that another mon may take it whatever it is.
fn not_sent(error: &ureq::Error) -> bool {
    match error {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Timeout(ureq::Timeout::Connect) => {
            true
        }
        ureq::Error::Io(error) => matches!(
            error.kind(),
            std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::HostUnreachable
                | std::io::ErrorKind::NetworkUnreachable
                | std::io::ErrorKind::AddrNotAvailable
        ),
        _ => false,
    }
}

/// A 2xx answer's JSON, or the API's error message as the error.
fn answer(method: &str, url: &str, mut response: ureq::http::Response<ureq::Body>) -> anyhow::Result<Value> {
    let status = response.status();
    let text = response.body_mut().read_to_string().with_context(|| format!("reading the answer to {method} {url}"))?;
    let value: Option<Value> = serde_json::from_str(&text).ok();
    if status.is_success() {
        return value.ok_or_else(|| anyhow!("{method} {url} answered {status} with a body that is not JSON"));
    }
    match value.as_ref().and_then(|value| value["error"].as_str()) {
        Some(message) => bail!("{message}"),
        None => bail!("{method} {url} answered {status}: {}", text.trim()),
    }
}

/// How a data-path command finds the cluster: the metadata store URL, or else the mon's API
/// (found as every command finds it: [`api_address`]) to ask for that URL.
#[derive(Debug, clap::Args)]
#[group(id = "cluster", multiple = false)]
pub struct ClusterArgs {
    /// The metadata store: http://HOST:PORT[,...] (etcd) or basalt://HOST:PORT (a mon's embedded store).
    #[arg(long = "etcd", visible_alias = "meta", value_name = "URL")]
    pub meta_url: Option<String>,
    /// The mon API address (or several, comma-separated) to read the metadata store URL from
    /// (GET /api/v1/cluster) [env: BASALT_API] [default: 127.0.0.1:8080].
    #[arg(long = "api", value_name = "ADDR")]
    pub api: Option<String>,
}

impl ClusterArgs {
    /// The mon's API address: `--api`, else `BASALT_API`, else the default.
    pub fn api(&self) -> String {
        api_address(self.api.as_deref())
    }

    /// The metadata store URL: `--etcd`, else the one the mon's API names.
    pub fn meta_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.meta_url {
            return Ok(url.clone());
        }
        let api = self.api();
        let cluster = ApiClient::new(&api).get("/cluster")?;
        cluster["meta_url"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the answer to GET /api/v1/cluster at {api} has no meta_url"))
    }
}

/// How the client library waits for the OSDs' replies.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// Microseconds a call may poll for its reply instead of sleeping, used only on
    /// connections whose replies come back within that on average (adaptive polling; 0, the
    /// default, never polls: ADR 0031)
    #[arg(long = "client-spin-us", value_name = "MICROSECONDS", default_value_t = 0)]
    pub client_spin_us: u64,
    /// Seconds an I/O may wait for its PG to serve (an inactive PG: too few members up) before
    /// it fails with an I/O error; 0 waits for as long as it takes. Failovers are retried
    /// through either way.
    #[arg(long = "io-timeout", value_name = "SECONDS", default_value_t = 0)]
    pub io_timeout_s: u64,
}

impl ClientArgs {
    pub fn spin_limit(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.client_spin_us)
    }

    /// Client library options with these settings; OSDs whose connections are refused are
    /// reported to the mon at `api` (ADR 0015).
    pub fn options(&self, api: &str) -> client::ClientOptions {
        client::ClientOptions {
            spin_limit: self.spin_limit(),
            io_timeout: (self.io_timeout_s > 0).then(|| std::time::Duration::from_secs(self.io_timeout_s)),
            down_reporter: Some(crate::down_reporter::MonReporter::api(api.to_string())),
            ..client::ClientOptions::default()
        }
    }
}

/// Decodes an API answer into its view type.
pub fn decode<T: DeserializeOwned>(value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value)
        .context("the API answer does not have the expected shape (is the mon the same version?)")
}

/// Percent-encodes one path segment (names are validated by the API, but must reach it intact).
pub fn segment(name: &str) -> String {
    let mut encoded = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Prints the JSON answer, pretty.
pub fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).expect("JSON values serialize"));
}

/// Prints rows under headers, columns aligned by two spaces; nothing but the headers if empty.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|header| header.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", text.trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A list for a table cell: `a,b`, or `-` when empty.
pub fn list_cell(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_names_and_escape_the_rest() {
        assert_eq!(segment("db-1.a_b"), "db-1.a_b");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn addresses_get_a_scheme_and_the_api_prefix() {
        assert_eq!(ApiClient::new("127.0.0.1:1").base_urls, ["http://127.0.0.1:1/api/v1"]);
        assert_eq!(ApiClient::new("http://h:2/, h:3,").base_urls, ["http://h:2/api/v1", "http://h:3/api/v1"]);
    }

    /// An address nothing listens on.
    fn refusing() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    }

    /// A mon that answers every request with `{"mon": name}`, or, with `name` empty, takes
    /// connections and never answers (a hung mon).
    fn mon(name: &'static str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                if name.is_empty() {
                    held.push(stream);
                    continue;
                }
                let mut request = [0u8; 4096];
                let _ = std::io::Read::read(&mut stream, &mut request);
                let body = format!("{{\"mon\":\"{name}\"}}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
            }
        });
        address
    }

    #[test]
    fn a_request_goes_to_the_next_mon_when_one_cannot_take_it() {
        let live = mon("b");
        let client = ApiClient::new(&format!("{},{live}", refusing()));
        assert_eq!(client.get("/status").unwrap()["mon"], "b");
        assert_eq!(client.post("/volumes", &serde_json::json!({})).unwrap()["mon"], "b", "a change never sent");
        // A hung mon: a read moves on after its attempt's bound.
        let client = ApiClient::new(&format!("{},{live}", mon("")));
        let started = std::time::Instant::now();
        assert_eq!(client.get("/status").unwrap()["mon"], "b");
        assert!(started.elapsed() < READ_ATTEMPT_TIMEOUT + Duration::from_secs(2));
        // None to take it: every address tried is named.
        let (first, second) = (refusing(), refusing());
        let error = ApiClient::new(&format!("{first},{second}")).get("/status").unwrap_err().to_string();
        assert!(error.contains(&first) && error.contains(&second), "{error}");
    }

    #[test]
    fn the_api_is_found_by_flag_then_environment_then_default() {
        assert_eq!(choose_api_address(Some("h:1"), Some("h:2")), "h:1");
        assert_eq!(choose_api_address(None, Some("h:2")), "h:2");
        assert_eq!(choose_api_address(None, Some("  ")), API_ADDRESS_DEFAULT);
        assert_eq!(choose_api_address(None, None), API_ADDRESS_DEFAULT);
    }
}
