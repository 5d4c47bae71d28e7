//! The builder setters of the backends' public configs (`EtcdConfig`, `ZkConfig`): one per
//! field, each documented as setting it, written once for every config.

/// `pub fn field(mut self, field: T) -> Self` for each `field: T` given, inside the config's
/// `impl` block.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
            pub fn $field(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
}

pub(crate) use setters;
