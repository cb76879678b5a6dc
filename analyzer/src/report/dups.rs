//! `heaptag dups`: the verdicts of [`crate::dups`] per log.

use serde::Serialize;

use super::Source;

/// `dups`'s JSON schema: 2 since issue 14 (originals and copies, waste at
/// the worst moment, content observed over time).
pub const DUPS_SCHEMA_VERSION: u32 = 2;
use crate::dups::{self, Dups};
use crate::model::Model;

/// `heaptag dups` for one log.
#[derive(Clone, Debug, Serialize)]
pub struct DupsSection {
    /// The log.
    pub source: Source,
    /// The finding.
    #[serde(flatten)]
    pub dups: Dups,
}

/// `heaptag dups`.
#[derive(Clone, Debug, Serialize)]
pub struct DupsReport {
    /// JSON schema version.
    pub schema_version: u32,
    /// One section per log (addresses are per process).
    pub sources: Vec<DupsSection>,
}

/// Builds `heaptag dups`.
pub fn dups(models: &[Model]) -> DupsReport {
    DupsReport {
        schema_version: DUPS_SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| DupsSection {
                source: Source::of(m),
                dups: dups::analyze(m),
            })
            .collect(),
    }
}
