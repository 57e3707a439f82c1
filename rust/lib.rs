//! Graph-walk kernels for arm-accel.
//!
//! Everything here works on a borrowed [`table::NodeTable`] (columnar arrays exported once from
//! a torch.fx graph) and never touches Python objects. The PyO3 bindings live in `bindings/`,
//! behind the `python` feature that only maturin turns on.

/// A group of named constants and `NAMED`, every one of them by name in definition order: the
/// Python side builds its enums from these (`_native.CONSTANTS`), so each value is written once.
/// The `bits` form also defines `ALL`, the union of the group's bits.
macro_rules! named_consts {
    ($ty:ty; $($(#[$meta:meta])* $name:ident = $value:expr;)*) => {
        $($(#[$meta])* pub const $name: $ty = $value;)*
        /// Every constant of this group by name, in definition order.
        pub const NAMED: &[(&str, $ty)] = &[$((stringify!($name), $name)),*];
    };
    (bits $ty:ty; $($(#[$meta:meta])* $name:ident = $value:expr;)*) => {
        named_consts!($ty; $($(#[$meta])* $name = $value;)*);
        /// Every bit of this group.
        pub const ALL: $ty = 0 $(| $name)*;
    };
}

pub mod chains;
pub mod membership;
pub mod propagate;
pub mod quantize;
pub mod signature;
pub mod synth;
pub mod table;
pub mod worklist;

#[cfg(feature = "python")]
mod bindings;

#[cfg(test)]
mod proptests;
