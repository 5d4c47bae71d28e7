//! Which priority class a request is checked as: the [`ClassFn`] of
//! [`ClusterRateLimitLayer::classes`](super::ClusterRateLimitLayer::classes).

/// What a class function may return: a class name (`String`, `&'static str`), or an `Option`
/// of one (`None`: the request is checked without a class, so it may use the whole quota).
pub trait IntoClass {
    /// The class, if any.
    fn into_class(self) -> Option<String>;
}

impl IntoClass for String {
    fn into_class(self) -> Option<String> {
        Some(self)
    }
}

impl IntoClass for &'static str {
    fn into_class(self) -> Option<String> {
        Some(self.to_string())
    }
}

impl IntoClass for Option<String> {
    fn into_class(self) -> Option<String> {
        self
    }
}

impl IntoClass for Option<&'static str> {
    fn into_class(self) -> Option<String> {
        self.map(str::to_string)
    }
}

/// Names each request's priority class on a rate limit whose quota keeps reserves
/// ([`Quota::reserve`](crate::Quota::reserve)): a request of a class is admitted only if the
/// class's reserve is still left after it. Closures `Fn(&Request) -> impl IntoClass` are
/// `ClassFn`s; the default, [`NoClass`], names none (every request may use the whole quota).
///
/// A class the quota does not declare, or a cost above what the class can ever take (the
/// burst, or a window's limit, less its reserve), refuses that request as a bad request
/// without a check: 400 with `field: "class"`, or
/// [`RateLimitError::InvalidRequest`](super::RateLimitError::InvalidRequest) with
/// `field: "class"`. A class chosen by the server (from the path, an authenticated role) is a
/// setup mistake then; one read from what the client sends is the client's.
///
/// ```
/// // Requests of the `/reports` path in the class `batch`, the rest in none.
/// let classes = |req: &http::Request<String>| {
///     req.uri().path().starts_with("/reports").then_some("batch")
/// };
/// # let _ = classes;
/// ```
pub trait ClassFn<Req> {
    /// The class of `req`; `None` checks it without one.
    fn class(&self, req: &Req) -> Option<String>;
}

impl<F, Req, O> ClassFn<Req> for F
where
    F: Fn(&Req) -> O,
    O: IntoClass,
{
    fn class(&self, req: &Req) -> Option<String> {
        self(req).into_class()
    }
}

/// The default [`ClassFn`]: requests name no class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoClass;

impl<Req> ClassFn<Req> for NoClass {
    fn class(&self, _: &Req) -> Option<String> {
        None
    }
}
