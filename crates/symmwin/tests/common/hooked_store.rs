//! A store that does something of a test's own around the calls it passes on to a real
//! store: dies, stalls, records or takes resources away at a chosen key.

use symmwin::{Result, Store};

/// What a test store adds around the calls it passes on.
pub trait StoreHooks: Send + Sync {
    /// Before `set` reaches the store.
    fn before_set(&self, _key: &str, _value: &[u8]) {}
    /// After `set` reached the store.
    fn after_set(&self, _key: &str) {}
    /// Before `try_get` reaches the store.
    fn before_get(&self, _key: &str) {}
    /// After `try_get` found `value`.
    fn after_get(&self, _key: &str, _value: Option<&[u8]>) {}
    /// What [`Store::describe`] says.
    fn describe(&self) -> Option<String> {
        None
    }
}

/// `inner`, with `hooks` around its calls.
pub struct Hooked<S, H> {
    pub inner: S,
    pub hooks: H,
}

impl<S: Store, H: StoreHooks> Store for Hooked<S, H> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.hooks.before_set(key, value);
        self.inner.set(key, value)?;
        self.hooks.after_set(key);
        Ok(())
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.hooks.before_get(key);
        let value = self.inner.try_get(key)?;
        self.hooks.after_get(key, value.as_deref());
        Ok(value)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(key, delta)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }

    fn describe(&self) -> Option<String> {
        self.hooks.describe()
    }
}
