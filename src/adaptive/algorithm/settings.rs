//! The algorithms' settings, as users write them: [`Aimd`], [`Gradient`] and the
//! [`CapacityAlgorithm`] that picks one. Plain values with defaults and setters; what they
//! mean is in `algorithm.rs`, which reads them.

use std::time::Duration;

/// Setters, so that settings can be built outside the crate although the struct may grow:
/// `Aimd::default().backoff(0.95)`. One `pub fn field(self, field) -> Self` per field named.
macro_rules! setters {
    ($settings:ident { $($field:ident: $type:ty),* $(,)? }) => {
        impl $settings {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
                pub fn $field(mut self, $field: $type) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

/// AIMD's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Aimd {
    /// Multiplier on an overloaded window (0 < backoff < 1; default 0.9).
    pub backoff: f64,
    /// Permits added by a window that used the capacity (default 1).
    pub increase: u32,
    /// Share of drops above which a window is overloaded (default 0.01).
    pub drop_threshold: f64,
    /// A median latency above this multiple of the learnt baseline (the dependency's unloaded
    /// latency, learnt as the gradient's is) also makes a window overloaded (default 1.5;
    /// `None`: drops only, no baseline learnt). Ignored when `latency_limit` is set.
    pub latency_tolerance: Option<f64>,
    /// A median latency above this makes a window overloaded, instead of the learnt baseline ×
    /// `latency_tolerance` (default `None`: the learnt one).
    pub latency_limit: Option<Duration>,
}

setters!(Aimd {
    backoff: f64,
    increase: u32,
    drop_threshold: f64,
    latency_tolerance: Option<f64>,
    latency_limit: Option<Duration>,
});

impl Default for Aimd {
    fn default() -> Self {
        Aimd {
            backoff: 0.9,
            increase: 1,
            drop_threshold: 0.01,
            latency_tolerance: Some(1.5),
            latency_limit: None,
        }
    }
}

/// The gradient's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Gradient {
    /// Latency up to `tolerance × baseline` counts as unloaded (default 1.5).
    pub tolerance: f64,
    /// Share of `√capacity` added per window while nothing queues (decreases apply fully;
    /// default 0.2).
    pub smoothing: f64,
    /// Which latency quantile is compared (default 0.5, the median).
    pub quantile: f64,
}

// `Gradient::default().tolerance(2.0)`.
setters!(Gradient {
    tolerance: f64,
    smoothing: f64,
    quantile: f64,
});

impl Default for Gradient {
    fn default() -> Self {
        Gradient {
            tolerance: 1.5,
            smoothing: 0.2,
            quantile: 0.5,
        }
    }
}

/// Which algorithm, with its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum CapacityAlgorithm {
    /// Additive increase, multiplicative decrease on drops and on latency over the baseline.
    Aimd(Aimd),
    /// Latency gradient against a protected baseline.
    Gradient(Gradient),
}

/// Old name of [`CapacityAlgorithm`]; using it warns (`clusterlimit::Algorithm` is the rate
/// limits' algorithm, another type).
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _ = clusterlimit::adaptive::Algorithm::Aimd(Default::default());
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `CapacityAlgorithm`")]
pub type Algorithm = CapacityAlgorithm;
