//! The daemon's metrics endpoint as a test sees it: a plain HTTP/1.1 GET
//! (no HTTP client crate needed) and a parser for the OpenMetrics text.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{within, WAIT};

/// An HTTP response, headers lower-cased.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` on `addr`, bounded.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<HttpResponse> {
    http_get_with(addr, path, &[]).await
}

/// [`http_get`] with extra request headers.
pub async fn http_get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<HttpResponse> {
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = within(WAIT, "an HTTP response", exchange).await??;
    let text = String::from_utf8(raw).context("the HTTP response is not UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("no end of headers in {text:?}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &str) -> anyhow::Result<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("truncated chunked body")?;
        let size = usize::from_str_radix(size.trim(), 16)
            .with_context(|| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(body);
        }
        let chunk = after.get(..size).context("truncated chunk")?;
        body.push_str(chunk);
        rest = after.get(size + 2..).context("truncated chunk end")?;
    }
}

/// The address the daemon logged for `--metrics-listen` ("metrics
/// listening ... addr=HOST:PORT").
pub fn metrics_addr(daemon_log: &str) -> Option<SocketAddr> {
    daemon_log
        .lines()
        .filter(|l| l.contains("metrics listening"))
        .flat_map(|l| l.split_whitespace())
        .find_map(|word| word.strip_prefix("addr=")?.parse().ok())
}

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub content_type: String,
    pub text: String,
    samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Scrapes `GET /metrics`, failing unless it answers 200.
pub async fn scrape(addr: SocketAddr) -> anyhow::Result<Scrape> {
    scrape_with(addr, &[]).await
}

/// [`scrape`] with extra request headers (a token).
pub async fn scrape_with(addr: SocketAddr, headers: &[(&str, &str)]) -> anyhow::Result<Scrape> {
    let response = http_get_with(addr, "/metrics", headers).await?;
    if response.status != 200 {
        bail!(
            "GET /metrics answered {}: {}",
            response.status,
            response.body
        );
    }
    let samples = parse(&response.body)?;
    Ok(Scrape {
        content_type: response
            .header("content-type")
            .unwrap_or_default()
            .to_owned(),
        text: response.body,
        samples,
    })
}

fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("metric line without a value: {line:?}"))?;
        let value: f64 = value
            .parse()
            .with_context(|| format!("bad value in {line:?}"))?;
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .with_context(|| format!("unclosed labels in {line:?}"))?;
                (name.to_owned(), parse_labels(inner))
            }
        };
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    Ok(samples)
}

/// `a="x",b="y"`; values here never hold quotes or commas.
fn parse_labels(inner: &str) -> Vec<(String, String)> {
    inner
        .split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        })
        .collect()
}

impl Scrape {
    /// The sum of the samples named `name` whose labels include `labels`
    /// (0 when there are none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// How many samples named `name` have labels that include `labels`.
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.matching(name, labels).count()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
    }

    /// Whether any sample is named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}
