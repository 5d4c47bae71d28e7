//! The inner service of both limiting middlewares (`concurrency`, `rate`): the accessors
//! tower's own middleware has, and the ready service `call` hands to the response future.

/// `get_ref`, `get_mut` and `into_inner`, inside the `impl` of a middleware whose inner
/// service `S` is its field `inner`.
macro_rules! inner_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Unwraps the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

pub(crate) use inner_accessors;

/// The service that was polled ready, taken for the request being called (the response
/// future calls it once admitted); a fresh clone takes its place and is polled for the next
/// request.
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let fresh = inner.clone();
    std::mem::replace(inner, fresh)
}
