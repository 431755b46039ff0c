//! Reaching the metadata store from a URL.
//!
//! - `http://host:port[,http://host:port...]`: an etcd cluster (v3 API).
//! - `basalt://host:port`: an embedded store served over TCP by `basalt mon --embedded PATH`.

use std::sync::Arc;

use meta::{MetaError, MetaStore};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaUrl {
    Etcd(Vec<String>),
    Embedded(String),
}

impl MetaUrl {
    pub fn parse(url: &str) -> Result<MetaUrl, String> {
        let url = url.trim();
        if let Some(address) = url.strip_prefix("basalt://") {
            if address.is_empty() || address.contains(',') || address.contains('/') {
                return Err(format!("metadata URL {url:?}: expected basalt://HOST:PORT"));
            }
            return Ok(MetaUrl::Embedded(address.to_string()));
        }
        let endpoints: Vec<String> = url.split(',').map(|e| e.trim().to_string()).collect();
        for endpoint in &endpoints {
            let rest = endpoint.strip_prefix("http://").ok_or_else(|| {
                format!("metadata URL {url:?}: expected http://HOST:PORT[,...] (etcd) or basalt://HOST:PORT (embedded store)")
            })?;
            if rest.is_empty() || rest.trim_end_matches('/').contains('/') {
                return Err(format!("metadata URL {url:?}: endpoint {endpoint:?} is not http://HOST:PORT"));
            }
        }
        Ok(MetaUrl::Etcd(endpoints))
    }
}

/// Connects to the store `url` names.
pub async fn connect(url: &str) -> Result<Arc<dyn MetaStore>, MetaError> {
    let parsed = MetaUrl::parse(url).map_err(|reason| MetaError::other(url, reason))?;
    Ok(match parsed {
        MetaUrl::Etcd(endpoints) => Arc::new(meta_etcd::EtcdMetaStore::connect(&endpoints).await?),
        MetaUrl::Embedded(address) => Arc::new(meta_embedded::RemoteMetaStore::connect(&address).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_expected() {
        assert_eq!(MetaUrl::parse("basalt://127.0.0.1:2390"), Ok(MetaUrl::Embedded("127.0.0.1:2390".into())));
        assert_eq!(
            MetaUrl::parse("http://127.0.0.1:2379,http://127.0.0.2:2379"),
            Ok(MetaUrl::Etcd(vec!["http://127.0.0.1:2379".into(), "http://127.0.0.2:2379".into()]))
        );
        assert!(MetaUrl::parse("127.0.0.1:2379").unwrap_err().contains("expected http://"));
        assert!(MetaUrl::parse("basalt://").is_err());
    }
}
