//! Graph-walk kernels for arm-accel.
//!
//! Everything here works on a borrowed [`table::NodeTable`] (columnar arrays exported once from
//! a torch.fx graph) and never touches Python objects. The PyO3 bindings live in `bindings/`,
//! behind the `python` feature that only maturin turns on.

pub mod chains;
pub mod membership;
pub mod propagate;
pub mod signature;
pub mod synth;
pub mod table;
pub mod worklist;

#[cfg(feature = "python")]
mod bindings;

#[cfg(test)]
mod proptests;
