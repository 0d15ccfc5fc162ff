//! Shared by the examples: where the Redis servers come from.
//!
//! With `DLM_REDIS_URL` set (several URLs separated by commas for Redlock),
//! or URLs given as arguments, the examples use those servers. Otherwise they
//! start private throwaway `redis-server` processes with `dlm-testkit`, which
//! stop when the example ends.
#![allow(dead_code)]

use dlm_testkit::RedisServer;

/// The error type of the examples' `main`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The servers an example talks to; private ones stop when this is dropped.
pub struct Servers {
    /// Their URLs.
    pub urls: Vec<String>,
    _private: Vec<RedisServer>,
}

impl Servers {
    /// The first URL.
    pub fn url(&self) -> &str {
        &self.urls[0]
    }
}

/// `n` servers: the given URLs, or `n` private servers if none were given.
pub fn servers(n: usize) -> Result<Servers, BoxError> {
    let mut urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty()
        && let Ok(env) = std::env::var("DLM_REDIS_URL")
    {
        urls = env
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect();
    }
    if !urls.is_empty() {
        if urls.len() < n {
            return Err(format!("this example needs {n} Redis URL(s), got {}", urls.len()).into());
        }
        println!("using {}", urls.join(", "));
        return Ok(Servers {
            urls,
            _private: Vec::new(),
        });
    }
    let private = RedisServer::start_many(n)?;
    let urls: Vec<String> = private.iter().map(RedisServer::url).collect();
    println!("started {n} private redis-server(s): {}", urls.join(", "));
    Ok(Servers {
        urls,
        _private: private,
    })
}
