//! How launches are joined to their kernels (chosen by the collector from what the session traces
//! and what the library has).

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinMode {
    /// KERNEL is not enabled.
    Off,
    /// KERNEL is enabled but the session traces no launch callback, so no launch can be seen to
    /// join (and the join's records are not asked for).
    NoLaunchCallbacks,
    /// 26.x: thread id + time containment with RUNTIME_API records, then correlationId.
    RuntimeApi,
    /// 8.x: external correlation (CUSTOM2) pushed around each launch.
    External,
    /// Neither is possible with this library; the reason.
    Unavailable(String),
}

impl JoinMode {
    pub fn describe(&self) -> String {
        match self {
            JoinMode::Off => "off (enable the \"kernel\" kind)".to_owned(),
            JoinMode::NoLaunchCallbacks => {
                "off (no launch callbacks traced: enable \"LAUNCH\" to join kernels to their launches)"
                    .to_owned()
            }
            JoinMode::RuntimeApi => "runtime_api".to_owned(),
            JoinMode::External => "external_correlation".to_owned(),
            JoinMode::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}
