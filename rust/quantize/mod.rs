//! Kernels of the quantization flow (torchao's pt2e observers, the per-tensor affine
//! quantization of constant tensors), modelled on torch's own arithmetic so their results are
//! bit-identical to stock's.

pub mod affine;
pub mod error;
pub mod histogram;
pub mod minmax;
pub mod observe;
pub mod reduce;
pub mod search;
