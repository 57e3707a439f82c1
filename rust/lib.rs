//! Graph-walk kernels for arm-accel.
//!
//! Everything here works on a borrowed [`table::NodeTable`] (columnar arrays exported once from
//! a torch.fx graph) and never touches Python objects. The PyO3 bindings live in [`python`],
//! behind the `python` feature that only maturin turns on.

pub mod chains;
pub mod dims;
pub mod membership;
pub mod propagate;
pub mod shapes;
pub mod signature;
pub mod synth;
pub mod table;
pub mod worklist;

#[cfg(feature = "python")]
mod py_propagate;
#[cfg(feature = "python")]
mod py_scan_plan;
#[cfg(feature = "python")]
mod python;

#[cfg(test)]
mod proptests;
