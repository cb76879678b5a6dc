//! `heaptag export`: a log in the formats other tools read.
//!
//! - [`pprof`]: a gzipped `profile.proto` heap profile with tag labels
//!   (`go tool pprof`, Pyroscope, Parca).

pub mod pprof;
