//! What the library crates' error enums share: [`Context`], an error that
//! says what was being done when its source failed, and [`ResultExt`], which
//! adds one to a `Result`.
//!
//! Each library crate declares its own enum with the variants its callers
//! decide on (not found, corrupt, busy, ...) and one `Other(Context)` variant
//! for everything they only report. A `Context` keeps the whole chain: the CLI
//! prints `{:#}` as "what was being done: why".
use std::error::Error as StdError;

/// Any error, boxed, as a [`Context`]'s source.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What was being done (`context`) when `source` failed. `{}` shows the
/// context, `{:#}` the whole chain (as anyhow's `{:#}` does).
#[derive(Debug)]
pub struct Context {
    pub context: String,
    pub source: BoxError,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            f.write_str(&chain(self))
        } else {
            f.write_str(&self.context)
        }
    }
}

impl StdError for Context {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl Context {
    pub fn new(context: impl Into<String>, source: impl Into<BoxError>) -> Context {
        Context {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// `.context(...)` / `.with_context(|| ...)` on any `Result` whose error can
/// be boxed (std, io, serde, other crates' enums, and plain messages).
pub trait ResultExt<T> {
    fn context(self, context: impl Into<String>) -> Result<T, Context>;
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T, Context>;
}

impl<T, E: Into<BoxError>> ResultExt<T> for Result<T, E> {
    fn context(self, context: impl Into<String>) -> Result<T, Context> {
        self.map_err(|e| Context::new(context, e))
    }

    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T, Context> {
        self.map_err(|e| Context::new(f(), e))
    }
}

/// `return Err(KIND(format!(...)).into())`: a failure of a message-carrying
/// kind, e.g. `fail!(TiersError::Busy, "tier {name}: all slots are busy")`.
#[macro_export]
macro_rules! fail {
    ($kind:path, $($arg:tt)*) => {
        return Err($kind(format!($($arg)*)).into())
    };
}

/// The message chain of an error, joined as anyhow's `{:#}` joins it:
/// "outer: inner: innermost". For places that keep an error as text (a
/// reply to a client, a log line).
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(next) = cur {
        s.push_str(": ");
        s.push_str(&next.to_string());
        cur = next.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn context_keeps_the_source_chain() {
        let r: Result<(), io::Error> = Err(io::Error::new(io::ErrorKind::NotFound, "gone"));
        let e = r.with_context(|| format!("reading {}", "/x")).unwrap_err();
        assert_eq!(e.context, "reading /x");
        let io = e.source.downcast_ref::<io::Error>().unwrap();
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        let outer = Context::new("loading", e);
        assert_eq!(chain(&outer), "loading: reading /x: gone");
        assert_eq!(format!("{outer:#}"), "loading: reading /x: gone");
        assert_eq!(format!("{outer}"), "loading");
    }

    #[test]
    fn plain_messages_are_sources_too() {
        let r: Result<(), String> = Err("bad byte".into());
        assert_eq!(
            chain(&r.context("parsing").unwrap_err()),
            "parsing: bad byte"
        );
    }
}
