//! How launches are joined to their kernels (chosen by the collector from what the session traces
//! and what the library has).

#[derive(Clone, Debug, PartialEq)]
pub enum JoinMode {
    /// KERNEL is not enabled.
    Off,
    /// KERNEL is enabled but the session traces no launch callback, so no launch can be seen to
    /// join (and the join's records are not asked for).
    NoLaunchCallbacks,
    /// 26.x: thread id + time containment with RUNTIME_API records, then correlationId; every
    /// launch (`join_sample` = 1).
    RuntimeApi,
    /// As `RuntimeApi`, exact because the user asked for the RUNTIME_API kind (its records come
    /// anyway, for the apis table): every launch joins whatever `join_sample` says.
    RuntimeApiAsked,
    /// As `RuntimeApi`, in the drain's sample windows only (`join_sample`, the fraction of time
    /// asked for; snapshots report the measured one).
    RuntimeApiSampled(f64),
    /// 8.x: external correlation (CUSTOM2) pushed around each launch.
    External,
    /// Neither is possible with this library; the reason.
    Unavailable(String),
}

impl JoinMode {
    /// A RUNTIME_API join, sampled or not.
    pub fn runtime_api(&self) -> bool {
        matches!(self, JoinMode::RuntimeApi | JoinMode::RuntimeApiAsked | JoinMode::RuntimeApiSampled(_))
    }

    /// Whether kernels and API records take part in a join.
    pub fn active(&self) -> bool {
        self.runtime_api() || *self == JoinMode::External
    }

    pub fn describe(&self) -> String {
        match self {
            JoinMode::Off => "off (enable the \"kernel\" kind)".to_owned(),
            JoinMode::NoLaunchCallbacks => {
                "off (no launch callbacks traced: enable \"LAUNCH\" to join kernels to their launches)"
                    .to_owned()
            }
            JoinMode::RuntimeApi => "runtime_api".to_owned(),
            JoinMode::RuntimeApiAsked => "runtime_api, exact (the runtime_api kind was asked for)".to_owned(),
            JoinMode::RuntimeApiSampled(f) => format!("runtime_api, sampled (join_sample={f})"),
            JoinMode::External => "external_correlation".to_owned(),
            JoinMode::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}
